"""The resolved stack: the ``stack`` object of ``resolve --json`` and of each lock group."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from provision.model._json import bad, obj, opt_int, opt_obj, opt_text, text, texts


@dataclass(frozen=True)
class DriverPin:
    """The driver the stack installs."""

    branch: str
    version: str
    kernel_modules: str | None  # open | proprietary
    install_method: str  # nvidia-repo | distro ("" in a lock that does not say: the install setting decides)

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "version": self.version,
            "kernel_modules": self.kernel_modules,
            "install_method": self.install_method,
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> DriverPin:
        d = obj(doc, where)
        branch = d.get("branch")
        if isinstance(branch, int) and not isinstance(branch, bool):  # a hand-written lock's 580
            branch = str(branch)
        return cls(
            text({"branch": branch}, "branch", where),
            text(d, "version", where),
            opt_text(d, "kernel_modules", where),
            text(d, "install_method", where),
        )


@dataclass(frozen=True)
class FrameworkPin:
    """One framework of the stack: torch has a ``variant``, the others ``extras``."""

    name: str
    version: str
    index_url: str
    cuda: str | None
    cudnn: str | None
    variant: str | None = None
    extras: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.name == "torch":
            return {
                "version": self.version,
                "variant": self.variant,
                "index_url": self.index_url,
                "cuda": self.cuda,
                "cudnn": self.cudnn,
            }
        return {
            "version": self.version,
            "extras": list(self.extras),
            "index_url": self.index_url,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
        }

    @classmethod
    def from_json(cls, name: str, doc: Any, where: str) -> FrameworkPin:
        d = obj(doc, where)
        return cls(
            name=name,
            version=text(d, "version", where),
            index_url=text(d, "index_url", where),
            cuda=opt_text(d, "cuda", where),
            cudnn=opt_text(d, "cudnn", where),
            variant=opt_text(d, "variant", where) if name == "torch" else None,
            extras=texts(d, "extras", where) if name != "torch" else (),
        )


@dataclass(frozen=True)
class SystemCudnn:
    """The system cuDNN and the CUDA major of its build."""

    version: str
    cuda_major: int | None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "cuda_major": self.cuda_major}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SystemCudnn:
        d = obj(doc, where)
        return cls(text(d, "version", where), opt_int(d, "cuda_major", where))


@dataclass(frozen=True)
class Stack:
    """What gets installed; None where a component is left alone (or not wanted).

    ``python_source`` is None in a lock written before it was recorded (read as ``os``, and
    written back without it). ``container_toolkit`` and ``dcgm`` are versions no resolve plans
    yet; a lock that names them gets their roles (and writes them back after the rest).
    """

    driver: DriverPin | None
    fabric_manager: str | None  # its version: always the driver's
    cuda_toolkit: str | None  # the system CUDA toolkit's major.minor
    cudnn: SystemCudnn | None
    frameworks: dict[str, FrameworkPin] = field(default_factory=dict)
    python: str = ""
    python_source: str | None = "os"  # os | standalone (python-build-standalone, installed by uv)
    container_toolkit: str | None = None
    dcgm: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "driver": self.driver.to_json() if self.driver else None,
            "fabric_manager": _version(self.fabric_manager),
            "cuda_toolkit": _version(self.cuda_toolkit),
            "cudnn": self.cudnn.to_json() if self.cudnn else None,
            "frameworks": {name: fw.to_json() for name, fw in self.frameworks.items()},
            "python": self.python,
        }
        if self.python_source is not None:
            doc["python_source"] = self.python_source
        for key, value in (("container_toolkit", self.container_toolkit), ("dcgm", self.dcgm)):
            if value is not None:
                doc[key] = _version(value)
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str = "stack") -> Stack:
        d = obj(doc, where)
        driver = d.get("driver")
        frameworks = d.get("frameworks") or {}
        if not isinstance(frameworks, Mapping) or not all(isinstance(k, str) for k in frameworks):
            raise bad(f"{where}.frameworks", "an object of frameworks")
        source = opt_text(d, "python_source", where)
        if source is not None and source not in ("os", "standalone"):
            raise bad(f"{where}.python_source", "os or standalone")
        return cls(
            driver=DriverPin.from_json(driver, f"{where}.driver") if driver is not None else None,
            fabric_manager=_version_of(d, "fabric_manager", where),
            cuda_toolkit=_version_of(d, "cuda_toolkit", where),
            cudnn=SystemCudnn.from_json(d["cudnn"], f"{where}.cudnn") if d.get("cudnn") is not None else None,
            frameworks={
                name: FrameworkPin.from_json(name, fw, f"{where}.frameworks.{name}") for name, fw in frameworks.items()
            },
            python=text(d, "python", where),
            python_source=source,
            container_toolkit=_version_of(d, "container_toolkit", where),
            dcgm=_version_of(d, "dcgm", where),
        )

    @property
    def source(self) -> str:
        """Where the Python comes from (``os`` in a lock that does not say)."""
        return self.python_source or "os"


def _version(value: str | None) -> dict[str, str] | None:
    return {"version": value} if value is not None else None


def _version_of(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    """A component written as ``{"version": ...}`` or null."""
    item = opt_obj(doc, key, where)
    return None if item is None else text(item, "version", f"{where}.{key}")
