"""The host a stack is resolved for: the ``host`` object of ``resolve --json`` and of each lock group."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provision.model._json import bad, obj, opt_text


@dataclass(frozen=True)
class ResolvedHost:
    """A host in brief (``gpu`` None: no GPU model given or found). A probed host's summary
    (:func:`provision.hosts.facts.host_description`) is one too, where the probe may not know the
    OS, the arch or the Python (None). ``kept_driver``: the driver version a stack that keeps the
    host's own driver was resolved against (set by plan, for ``up --lock``'s check)."""

    gpu: str | None
    compute_capability: str | None
    gpu_count: int
    os: str | None
    arch: str | None
    python: str | None
    instance_type: str | None = None
    kept_driver: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "gpu": self.gpu,
            "compute_capability": self.compute_capability,
            "gpu_count": self.gpu_count,
            "os": self.os,
            "arch": self.arch,
            "python": self.python,
        }
        if self.instance_type:
            doc["instance_type"] = self.instance_type
        if self.kept_driver:
            doc["kept_driver"] = self.kept_driver
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str = "host") -> ResolvedHost:
        d: Mapping[str, Any] = obj(doc, where)
        count = d.get("gpu_count", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise bad(f"{where}.gpu_count", "a count")
        return cls(
            gpu=opt_text(d, "gpu", where),
            compute_capability=opt_text(d, "compute_capability", where),
            gpu_count=count,
            os=opt_text(d, "os", where),
            arch=opt_text(d, "arch", where),
            python=opt_text(d, "python", where),
            instance_type=opt_text(d, "instance_type", where),
            kept_driver=opt_text(d, "kept_driver", where),
        )
