"""Measure the GPU architectures a torch wheel really carries code for (pytorch.yaml arch lists).

    .venv/bin/python -m provision.matrix.fatbin 2.11.0 2.15.0 [--arch aarch64] [--python 3.12]

For each release: the wheel's URL from the index's simple API (PEP 691 JSON; ``--index``,
default pypi.org), downloaded into a temporary directory (one at a time, deleted afterwards: the
aarch64 wheels are 1-3 GB), ``torch/lib/libtorch_cuda.so`` streamed out of the zip, and its
``.nv_fatbin`` ELF section parsed. cuobjdump is not needed (nor installed here): the section is
a run of fat binaries, each a 16-byte header (magic 0xBA55ED50, version, header size, size of
what follows) then entries, each with its own header (kind 1 = PTX, 2 = ELF/SASS; header size;
payload size; ...; the target ``sm`` as an integer at byte 28), laid out back to back. This is
the layout CUDA's own ``fatbinary_section.h`` declares for the container and that the open
fatbin readers (e.g. cuda-fatbin-decompression) use for the entries; entries whose payload is
compressed keep an uncompressed header, so no decompression is needed to read the target.

The run of 2026-12-04 is kept in evidence/torch-aarch64-fatbin-2026-12-04.jsonl (source
``torch_aarch64_wheels_measured``), which a unit test compares pytorch.yaml with.

Prints one JSON line per release: the SASS architectures with their kernel counts and the PTX
targets, as compute capabilities (``sm_103`` -> "10.3"). The counts let a reader tell a real
target from a stray library kernel (a few 10.3/12.1 kernels come from bundled libraries).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import struct
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

MAGIC = 0xBA55ED50
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
LIB = "torch/lib/libtorch_cuda.so"


def wheel_url(version: str, arch: str, python: str, index: str) -> tuple[str, int]:
    """The linux ``arch`` wheel of torch ``version`` for CPython ``python`` (URL, size), from the
    index's simple API in its JSON form (PEP 691), as provision.matrix.pypi reads it."""
    req = urllib.request.Request(f"{index.rstrip('/')}/torch/", headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(req, timeout=60) as r:
        doc = json.load(r)
    tag = "cp" + python.replace(".", "")
    for f in doc["files"]:
        name = f["filename"]
        if name.startswith(f"torch-{version}-{tag}-{tag}-") and name.endswith(f"_{arch}.whl") and "linux" in name:
            return urllib.parse.urljoin(req.full_url, f["url"]), int(f.get("size") or 0)
    raise SystemExit(f"torch {version}: no {tag} linux {arch} wheel on {index}")


def fatbin_section(path: Path) -> tuple[int, int]:
    """(file offset, size) of the ELF64 little-endian ``.nv_fatbin`` section of ``path``."""
    with path.open("rb") as f:
        eh = f.read(64)
        if eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:
            raise SystemExit(f"{path}: not a little-endian ELF64 file")
        (shoff,) = struct.unpack_from("<Q", eh, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", eh, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        headers = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
        f.seek(str_off)
        names = f.read(str_size)
    for h in headers:
        name = names[h[0] : names.index(b"\0", h[0])].decode()
        if name == ".nv_fatbin":
            return h[4], h[5]
    raise SystemExit(f"{path}: no .nv_fatbin section")


def targets(blob: bytes) -> tuple[collections.Counter[int], collections.Counter[int]]:
    """SASS and PTX entry counts per ``sm`` in a ``.nv_fatbin`` section's bytes."""
    sass: collections.Counter[int] = collections.Counter()
    ptx: collections.Counter[int] = collections.Counter()
    off = 0
    magic = struct.pack("<I", MAGIC)
    while True:
        off = blob.find(magic, off)
        if off < 0 or off + 16 > len(blob):
            return sass, ptx
        _, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, off)
        pos, end = off + header_size, off + header_size + fat_size
        while pos + 32 <= end:
            kind, _u, eh_size, size = struct.unpack_from("<HHIQ", blob, pos)
            (sm,) = struct.unpack_from("<I", blob, pos + 28)
            if kind == 2:
                sass[sm] += 1
            elif kind == 1:
                ptx[sm] += 1
            else:  # not an entry header: this container is not the layout read here, skip it
                break
            if eh_size == 0:  # a header that does not move on would loop: stop reading this one
                break
            pos += eh_size + size
        off = max(end, off + 4)


def cc(sm: int) -> str:
    """``sm_103`` -> "10.3" (the data's compute capability spelling)."""
    return f"{sm // 10}.{sm % 10}"


def measure(version: str, arch: str, python: str, index: str) -> dict[str, object]:
    url, size = wheel_url(version, arch, python, index)
    tmp = Path(tempfile.mkdtemp(prefix="torch-fatbin-"))
    try:
        wheel = tmp / url.rsplit("/", 1)[-1]
        with urllib.request.urlopen(url, timeout=120) as r, wheel.open("wb") as out:
            shutil.copyfileobj(r, out, 1 << 22)
        lib = tmp / "libtorch_cuda.so"
        with zipfile.ZipFile(wheel) as z, z.open(LIB) as src, lib.open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 22)
        wheel.unlink()  # the wheel is no longer needed: keep the disk use to one library
        off, n = fatbin_section(lib)
        with lib.open("rb") as f:
            f.seek(off)
            sass, ptx = targets(f.read(n))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "torch": version,
        "arch": arch,
        "wheel": url.rsplit("/", 1)[-1],
        "wheel_bytes": size,
        "sass": {cc(s): sass[s] for s in sorted(sass)},
        "ptx": {cc(s): ptx[s] for s in sorted(ptx)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("versions", nargs="+")
    p.add_argument("--arch", default="aarch64", choices=["aarch64", "x86_64"])
    p.add_argument("--python", default="3.12")
    p.add_argument("--index", default="https://pypi.org/simple")
    a = p.parse_args(argv)
    for v in a.versions:
        print(json.dumps(measure(v, a.arch, a.python, a.index)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
