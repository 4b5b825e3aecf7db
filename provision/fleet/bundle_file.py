"""The bundle file of ``provision bundle``: one tarball and its ``MANIFEST``, written and checked.

Layout (every member a plain file; no folders, links or devices)::

    MANIFEST              the sha256 of every other member, first in the tarball
    MANIFEST.asc          with --sign only: the MANIFEST's armored detached gpg signature
    bundle.json           what the bundle is for: the lock's sha256, OS releases, arches, groups
    provision.lock        the lock, byte for byte as given
    wheels/<key>/*.whl    each group's framework closure, by the lock's hashes (key: cp311-x86_64)
    uv/<arch>/*.whl       uv's wheel for the hosts' CPU, by the knowledge's hash
    python/<build>/<file> a standalone CPython (python-build-standalone's archive) where a lock
                          installs one, as a mirror has it, and python/downloads.json: uv's
                          download list naming only these archives, each by its sha256
    apt/<os>-<arch>/      the OS packages the plays install, with their dependency closure: a flat
                          apt repository (*.deb, Packages, Packages.gz, Release, InRelease) signed
                          with a key made for the bundle (bundle-key.asc)
    playbooks/...         the roles and site.yml the hosts are provisioned with
    remote/...            what runs on the hosts: the smoke job, provision-health

``MANIFEST`` is the format of GNU coreutils' ``sha256sum`` (one ``<64 hex>  <path>`` line per
member, two spaces, sorted by path), so a host checks an unpacked bundle with ``sha256sum -c
--strict MANIFEST`` alone (coreutils' manual, "md5sum invocation": the check format and
``--strict``, https://www.gnu.org/software/coreutils/manual/html_node/md5sum-invocation.html).

The tarball is written the same way every time (members sorted by path, mtime 0, owner 0/0 with
no names, modes 0644/0755, gzip's own header time 0 and no file name in it): the same inputs give
the same bytes. A bundle with OS packages has a new repository key, signature and date each build.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, NamedTuple, cast

from provision.errors import BadInput, OperationFailed
from provision.files import sha256_file
from provision.fleet.bundle_sign import SIGNATURE, fingerprint
from provision.fleet.bundle_sign import check as check_signature

MANIFEST = "MANIFEST"
INFO = "bundle.json"
LOCK = "provision.lock"
SCHEMA = "provision.bundle/1"
_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")
_BLOCK = 1 << 20


def manifest_text(digests: Mapping[str, str]) -> str:
    """``MANIFEST``'s text: ``sha256sum``'s check format, sorted by path."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def parse_manifest(text: str) -> dict[str, str]:
    """path -> sha256 of a ``MANIFEST``; BadInput naming the first malformed line."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.fullmatch(line)
        if m is None or not safe_name(m[2]) or m[2] in out or m[2] == MANIFEST:
            raise BadInput(f"the bundle's MANIFEST line {n} is malformed", "build the bundle again")
        out[m[2]] = m[1]
    return out


def safe_name(name: str) -> bool:
    """A member path that unpacks inside the folder it is unpacked in: relative, no ``..``."""
    p = PurePosixPath(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts and "\\" not in name and "\n" not in name


class Written(NamedTuple):
    manifest_sha256: str  # what ``--sign`` would sign
    sha256: str  # of the whole tarball, hashed as it was written (not read back)


class _Hashing:
    """A write-only file that hashes what passes through it (gzip writes the tarball into it)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.hash = raw, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def write_bundle(
    out: Path,
    files: Mapping[str, Path],
    info: Mapping[str, object],
    sign: Callable[[bytes], bytes] | None = None,
) -> Written:
    """Write the tarball ``out`` of ``files`` (member path -> file on disk) with ``bundle.json``
    (``info``) and ``MANIFEST`` (and ``MANIFEST.asc``, what ``sign`` makes of the MANIFEST); the
    MANIFEST's sha256 and the tarball's."""
    info_bytes = (json.dumps(dict(info), indent=2, sort_keys=True) + "\n").encode()
    digests = {name: sha256_file(path) for name, path in files.items()}
    digests[INFO] = hashlib.sha256(info_bytes).hexdigest()
    manifest = manifest_text(digests).encode()
    signature = sign(manifest) if sign is not None else b""
    tmp = out.with_name(f".{out.name}.part")
    with tmp.open("wb") as raw:
        hashing = _Hashing(raw)
        _write_tar(hashing, manifest=manifest, signature=signature, info_bytes=info_bytes, digests=digests, files=files)
    tmp.replace(out)
    return Written(hashlib.sha256(manifest).hexdigest(), hashing.hash.hexdigest())


def _write_tar(
    raw: _Hashing,
    *,
    manifest: bytes,
    signature: bytes,
    info_bytes: bytes,
    digests: Mapping[str, str],
    files: Mapping[str, Path],
) -> None:
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        _add_bytes(tar, MANIFEST, manifest)
        if signature:
            _add_bytes(tar, SIGNATURE, signature)
        for name in sorted(digests):
            if name == INFO:
                _add_bytes(tar, INFO, info_bytes)
            else:
                path = files[name]
                with path.open("rb") as f:
                    tar.addfile(_member(name, path.stat().st_size, executable=_executable(path)), f)


def _member(name: str, size: int, *, executable: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o755 if executable else 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o100)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_member(name, len(data)), io.BytesIO(data))


@dataclass(frozen=True)
class Checked:
    """A bundle whose every member matched its MANIFEST."""

    path: Path
    info: dict[str, Any]
    files: int
    size: int  # bytes of the members (unpacked)
    manifest_sha256: str
    sha256: str = ""  # of the whole file, hashed as it was read for the check
    lock: bytes = b""  # the lock it holds, as checked
    manifest: bytes = b""
    signature: bytes = b""  # MANIFEST.asc; b"": not signed
    signer: str | None = None  # the primary key fingerprint --signed-by checked


class _HashingReader:
    """A read-only file that hashes what is read through it (tarfile reads the bundle from it)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.hash = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        return data

    def rest(self) -> str:
        """The whole file's sha256, once what the tarball left unread (gzip's padding) is read too."""
        while self.read(_BLOCK):
            pass
        return self.hash.hexdigest()


def verify_bundle(path: Path, signed_by: str | None = None) -> Checked:
    """Check every member of the bundle at ``path`` against its ``MANIFEST``, reading it once, and
    with ``signed_by`` (a key fingerprint) the MANIFEST's signature (:mod:`provision.fleet.bundle_sign`).

    Not a bundle at all (no such file, not a tarball, no MANIFEST first) is BadInput (exit 2); a
    bundle whose member differs from the MANIFEST, is missing from the tarball, is not in the
    MANIFEST, or is not a plain file with a safe path is OperationFailed (exit 1), naming the
    first such member."""
    if signed_by is not None:
        signed_by = fingerprint(signed_by)  # a short one is bad input before the file is read
    if not path.is_file():
        raise BadInput(f"no bundle file at {path}", "pass the file `provision bundle -o` wrote")
    try:
        with path.open("rb") as raw:
            reader = _HashingReader(raw)
            with tarfile.open(fileobj=cast("IO[bytes]", reader), mode="r|*") as tar:
                checked = _check(path, _members(tar))
            checked = dataclasses.replace(checked, sha256=reader.rest())
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError) as exc:
        raise BadInput(
            f"{path} is not a readable bundle ({' '.join(str(exc).split())[:120]})", "build it again"
        ) from None
    if signed_by is not None:
        signer = check_signature(checked.manifest, checked.signature, signed_by)
        checked = dataclasses.replace(checked, signer=signer)
    return checked


def _members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    for ti in tar:
        yield ti, tar.extractfile(ti) if ti.isfile() else None


def _check(path: Path, members: Iterable[tuple[tarfile.TarInfo, IO[bytes] | None]]) -> Checked:
    it = iter(members)
    first = next(it, None)
    if first is None or first[0].name != MANIFEST or first[1] is None:
        raise BadInput(f"{path} has no MANIFEST as its first member: not a provision bundle", "build it again")
    manifest_bytes = first[1].read()
    expected = parse_manifest(manifest_bytes.decode("utf-8", errors="replace"))
    signature = b""
    seen: set[str] = set()
    size = 0
    kept: dict[str, bytes] = {INFO: b"", LOCK: b""}
    for ti, f in it:
        name = ti.name
        if name == SIGNATURE and not seen and not signature and f is not None:  # right after the MANIFEST
            signature = f.read()
            continue
        if f is None or not safe_name(name):
            raise OperationFailed(f"bundle member {name} is not a plain file with a relative path", "build it again")
        if name in seen or name not in expected:
            raise OperationFailed(f"bundle member {name} is not in its MANIFEST", "build the bundle again")
        h = hashlib.sha256()
        keep = name in kept
        while block := f.read(_BLOCK):
            h.update(block)
            if keep:
                kept[name] += block
        if h.hexdigest() != expected[name]:
            raise OperationFailed(
                f"bundle member {name} does not match its sha256 in the MANIFEST",
                "the file was changed or damaged on the way; copy or build the bundle again",
            )
        seen.add(name)
        size += ti.size
    missing = sorted(set(expected) - seen)
    if missing:
        raise OperationFailed(f"bundle member {missing[0]} is in the MANIFEST but not in the bundle", "build it again")
    info = _info(kept[INFO], path)
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    return Checked(path, info, len(seen), size, digest, lock=kept[LOCK], manifest=manifest_bytes, signature=signature)


def _info(data: bytes, path: Path) -> dict[str, Any]:
    try:
        info = json.loads(data)
    except ValueError:
        info = None
    if not isinstance(info, dict) or info.get("schema") != SCHEMA:
        raise BadInput(f"{path} has no {INFO} of schema {SCHEMA}", "build it again with this provision")
    return info
