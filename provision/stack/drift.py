"""Drift: which locked versions a host no longer has (pure; the probing is :mod:`provision.fleet.status`).

:func:`expected_versions` reads a lock group as flat ``{item: version}``; :func:`drift` compares
that with what a probe or the smoke job observed and names every item that left the lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provision.stack.lock import LockGroup


@dataclass(frozen=True)
class Drift:
    item: str  # driver | fabric_manager | torch | torch_variant | torch_cuda | cudnn | ...
    expected: str | None
    observed: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"item": self.item, "expected": self.expected, "observed": self.observed}

    def __str__(self) -> str:
        return f"{self.item}: locked {self.expected or 'none'}, found {self.observed or 'none'}"


def cudnn_number(version: str) -> str:
    """``"9.10.2.21"`` -> ``"91002"``: the integer torch.backends.cudnn.version() reports.

    cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + minor*100 + patch.
    """
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return str(major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch)


def _public(version: str) -> tuple[str, str | None]:
    """``"2.8.0+cu128"`` -> (``"2.8.0"``, ``"cu128"``)."""
    base, _, local = version.partition("+")
    return base, (local or None)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def expected_versions(group: LockGroup) -> dict[str, str | None]:
    """What the lock says a host of ``group`` should report, keyed like :func:`drift`'s input."""
    s = group.stack
    out: dict[str, str | None] = {}
    drv = s.get("driver")
    if drv:
        out["driver"] = drv.get("version")
    fm = s.get("fabric_manager")
    if fm:
        out["fabric_manager"] = fm.get("version")
    if s.get("cuda_toolkit"):
        out["cuda_toolkit"] = s["cuda_toolkit"].get("version")
    fws = s.get("frameworks") or {}
    torch = fws.get("torch")
    if torch:
        out["torch"] = torch.get("version")
        out["torch_variant"] = torch.get("variant")
        out["torch_cuda"] = torch.get("cuda")
        out["cudnn"] = cudnn_number(torch["cudnn"]) if torch.get("cudnn") else None
    for name in ("tensorflow", "jax"):
        if name in fws:
            out[name] = fws[name].get("version")
    if s.get("python"):
        out["python"] = s["python"]
    return out


def drift(group: LockGroup, observed: Mapping[str, str | None]) -> list[Drift]:
    """Items whose observed version differs from the lock (only items that were observed).

    ``observed`` is what verify/probe found, e.g. ``{"driver": "580.95.05", "torch":
    "2.8.0+cu128", "torch_cuda": "12.8", "cudnn": "91002", "python": "3.11.2"}``; a key that is
    absent was not looked at and is not drift, a key present with ``None`` means "not installed".
    """
    expected = expected_versions(group)
    out: list[Drift] = []
    for item, want in expected.items():
        if item == "torch_variant":  # read from the local tag of the observed torch version
            seen = observed.get("torch")
            local = _public(seen)[1] if seen else None
            if want is not None and local is not None and local != want:
                out.append(Drift(item, want, local))
            continue
        if item not in observed:
            continue
        got = observed[item]
        if not _same(item, want, got):
            out.append(Drift(item, want, got))
    return out


def _same(item: str, want: str | None, got: str | None) -> bool:
    if want is None or got is None:
        return want == got
    if item in ("torch", "tensorflow", "jax"):
        return _public(got)[0] == _public(want)[0]
    if item in ("torch_cuda", "cuda_toolkit", "python"):
        return _major_minor(got) == _major_minor(want)
    return str(got).strip() == str(want).strip()
