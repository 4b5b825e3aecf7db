"""Damaging a real bundle file the way a bad disk or a tampering hand would: one byte of one member."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path


def flip_byte(src: Path, dst: Path, member: str, at: int = 10) -> None:
    """Copy the bundle ``src`` to ``dst`` with byte ``at`` of ``member``'s data flipped in the tar
    stream itself (the tar headers and every other member left as they are)."""
    raw = bytearray(gzip.decompress(src.read_bytes()))
    with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tar:
        info = tar.getmember(member)
    assert info.size > at, f"{member} has {info.size} bytes"
    raw[info.offset_data + at] ^= 0x01
    dst.write_bytes(gzip.compress(bytes(raw)))
