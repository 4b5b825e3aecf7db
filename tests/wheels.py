"""Real wheel files made in tests: what pip and uv read, resolve and install."""

from __future__ import annotations

import base64
import hashlib
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    requires: tuple[str, ...] = (),
    *,
    who: str = "",
    scripts: Mapping[str, str] | None = None,
) -> Path:
    """A real py3-none-any wheel. ``who``: what its module's ``WHO`` says (two wheels of one name
    and version with another ``who`` are two different files); ``scripts``: files of its
    ``.data/scripts`` (installed into the venv's bin/, executable)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"WHO = {who!r}\n" if who else "",
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)
        ),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        **{f"{name}-{version}.data/scripts/{s}": text for s, text in (scripts or {}).items()},
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            info = zipfile.ZipInfo(path)
            info.external_attr = (stat.S_IFREG | 0o755) << 16  # pip makes a regular file with x bits executable
            z.writestr(info, text)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
