"""The bundle file and its MANIFEST, on real tarballs: written deterministically, every member
checked, the first bad one named."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from provision.errors import BadInput, OperationFailed
from provision.fleet.bundle_file import INFO, MANIFEST, SCHEMA, parse_manifest, verify_bundle, write_bundle
from tests.support.bundles import flip_byte
from tests.wheels import make_wheel


def _files(tmp_path: Path) -> dict[str, Path]:
    src = tmp_path / "src"
    a = make_wheel(src, "alpha", "1.0")
    b = make_wheel(src, "beta", "2.0")
    lock = src / "provision.lock"
    lock.write_text('{"schema": "provision.lock/2"}\n')
    return {"wheels/cp311-x86_64/" + a.name: a, "wheels/cp311-x86_64/" + b.name: b, "provision.lock": lock}


def _write(tmp_path: Path, name: str = "b.tar.gz") -> Path:
    out = tmp_path / name
    write_bundle(out, _files(tmp_path), {"schema": SCHEMA, "os": ["debian-12"]})
    return out


def _copy(src: Path, dst: Path, *, drop: str = "", add: tuple[str, bytes] | None = None) -> Path:
    """``src`` rewritten as ``dst`` without member ``drop`` and with ``add`` (name, data) at the end."""
    with tarfile.open(src) as old, tarfile.open(dst, "w:gz") as new:
        for m in old.getmembers():
            if m.name != drop:
                new.addfile(m, old.extractfile(m))
        if add is not None:
            ti = tarfile.TarInfo(add[0])
            ti.size = len(add[1])
            new.addfile(ti, io.BytesIO(add[1]))
    return dst


def test_the_same_inputs_give_the_same_bytes_and_the_manifest_comes_first(tmp_path: Path) -> None:
    one = _write(tmp_path, "one.tar.gz")
    (tmp_path / "src" / "provision.lock").touch()  # a new mtime: not part of the bundle
    two = _write(tmp_path, "two.tar.gz")
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tar:
        members = tar.getmembers()
    assert members[0].name == MANIFEST
    names = [m.name for m in members[1:]]
    assert names == sorted(names)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}


def test_verify_passes_a_good_bundle_and_sha256sum_agrees_with_the_manifest(tmp_path: Path) -> None:
    out = _write(tmp_path)
    checked = verify_bundle(out)
    assert checked.files == 4 and checked.info["os"] == ["debian-12"]
    # the format is coreutils' own: an unpacked bundle checks with sha256sum alone
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out) as tar:
        tar.extractall(unpacked, filter="data")
    r = subprocess.run(
        ["sha256sum", "-c", "--strict", "--quiet", MANIFEST], cwd=unpacked, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_flipped_byte_of_one_wheel_is_refused_naming_the_wheel(tmp_path: Path) -> None:
    out = _write(tmp_path)
    bad = tmp_path / "bad.tar.gz"
    flip_byte(out, bad, "wheels/cp311-x86_64/beta-2.0-py3-none-any.whl")
    with pytest.raises(
        OperationFailed, match=r"bundle member wheels/cp311-x86_64/beta-2\.0-py3-none-any\.whl does not"
    ):
        verify_bundle(bad)


def test_a_member_the_manifest_does_not_name_is_refused(tmp_path: Path) -> None:
    out = _write(tmp_path)
    extra = _copy(out, tmp_path / "extra.tar.gz", add=("playbooks/evil.yml", b"x: 1"))
    with pytest.raises(OperationFailed, match=r"playbooks/evil\.yml is not in its MANIFEST"):
        verify_bundle(extra)


def test_a_member_missing_from_the_tarball_is_named(tmp_path: Path) -> None:
    out = _write(tmp_path)
    short = _copy(out, tmp_path / "short.tar.gz", drop="provision.lock")
    with pytest.raises(OperationFailed, match=r"provision\.lock is in the MANIFEST but not in the bundle"):
        verify_bundle(short)


def test_not_a_bundle_is_bad_input(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    with pytest.raises(BadInput, match="not a readable bundle"):
        verify_bundle(junk)
    with pytest.raises(BadInput, match="no bundle file"):
        verify_bundle(tmp_path / "missing.tar.gz")
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(_files(tmp_path)["provision.lock"], arcname="provision.lock")
    with pytest.raises(BadInput, match="no MANIFEST as its first member"):
        verify_bundle(plain)


@pytest.mark.parametrize(
    "line",
    [
        f"{'0' * 64}  ../etc/passwd",
        f"{'0' * 64}  /etc/passwd",
        f"{'0' * 63}  a",
        f"{'0' * 64} a",
        f"{'0' * 64}  {INFO}\n{'1' * 64}  {INFO}",
    ],
)
def test_a_malformed_or_escaping_manifest_line_is_refused(line: str) -> None:
    with pytest.raises(BadInput, match="MANIFEST line"):
        parse_manifest(line + "\n")


def test_the_manifest_hashes_are_the_files_sha256(tmp_path: Path) -> None:
    files = _files(tmp_path)
    out = _write(tmp_path)
    with tarfile.open(out) as tar:
        manifest = parse_manifest(tar.extractfile(MANIFEST).read().decode())  # type: ignore[union-attr]
    for name, path in files.items():
        assert manifest[name] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_hashes_returned_are_the_written_tarballs_and_its_manifests(tmp_path: Path) -> None:
    """write_bundle hashes the tarball as it writes it (the bundle is not read back for its sha256)."""
    out = tmp_path / "b.tar.gz"
    written = write_bundle(out, _files(tmp_path), {"schema": SCHEMA, "os": ["debian-12"]})
    assert written.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    with tarfile.open(out) as tar:
        manifest = tar.extractfile(MANIFEST).read()  # type: ignore[union-attr]
    assert written.manifest_sha256 == hashlib.sha256(manifest).hexdigest()
