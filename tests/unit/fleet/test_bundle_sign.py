"""`bundle --sign` and `--signed-by`: real gpg, with keys made for the test in a throwaway
GNUPGHOME (the user's keyring stands in for nobody's: these are keys of this test only)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.errors import BadInput, OperationFailed
from provision.fleet.bundle_file import SCHEMA, verify_bundle, write_bundle
from provision.fleet.bundle_sign import SIGNATURE, fingerprint, sign
from tests.cli_run import provision


def _key(name: str) -> str:
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", f"{name} <{name}@example.invalid>", "ed25519", "sign", "never"], check=True
    )
    colons = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-keys", name], capture_output=True, text=True, check=True
    ).stdout
    return next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    old = os.environ.get("GNUPGHOME")
    os.environ["GNUPGHOME"] = str(home)
    try:
        yield _key("builder"), _key("stranger")
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], check=False, capture_output=True)
        if old is None:
            del os.environ["GNUPGHOME"]
        else:
            os.environ["GNUPGHOME"] = old


def _bundle(tmp_path: Path, name: str, signer: str | None, *, over: bytes | None = None) -> Path:
    lock = tmp_path / "provision.lock"
    lock.write_text('{"schema": "provision.lock/2"}\n')
    out = tmp_path / name
    signing = None
    if signer is not None:

        def signing(manifest: bytes) -> bytes:
            return sign(over if over is not None else manifest, signer)

    write_bundle(out, {"provision.lock": lock}, {"schema": SCHEMA, "os": ["debian-12"]}, signing)
    return out


def test_a_signed_bundle_checks_against_its_signers_fingerprint_only(tmp_path: Path, keys: tuple[str, str]) -> None:
    builder, stranger = keys
    signed = _bundle(tmp_path, "signed.tar.gz", builder)
    checked = verify_bundle(signed, builder.lower()[:20] + " " + builder.lower()[20:])  # as gpg --fingerprint spaces it
    assert checked.signer == builder and checked.files == 2  # MANIFEST.asc is not a member the MANIFEST lists
    assert verify_bundle(signed).signer is None  # not asked: not checked
    with pytest.raises(OperationFailed, match=f"^the bundle is signed by key {builder}, not {stranger}$"):
        verify_bundle(signed, stranger)
    with pytest.raises(OperationFailed, match=r"^the bundle is not signed \(no MANIFEST.asc\)$"):
        verify_bundle(_bundle(tmp_path, "plain.tar.gz", None), builder)
    forged = _bundle(tmp_path, "forged.tar.gz", builder, over=b"another MANIFEST\n")
    with pytest.raises(OperationFailed, match=f"^the bundle's {SIGNATURE} is not a good signature of its MANIFEST$"):
        verify_bundle(forged, builder)


def test_a_key_missing_from_the_keyring_or_a_short_fingerprint_is_bad_input(
    tmp_path: Path, keys: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    builder, _ = keys
    signed = _bundle(tmp_path, "signed.tar.gz", builder)
    with pytest.raises(BadInput, match="is not a full key fingerprint"):
        fingerprint(builder[-16:])
    empty = tmp_path / "empty-gnupg"
    empty.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(empty))
    with pytest.raises(BadInput, match=r"^the key that signed the bundle is not in your gpg keyring$"):
        verify_bundle(signed, builder)


def test_the_cli_says_who_signed_it(tmp_path: Path, keys: tuple[str, str]) -> None:
    builder, stranger = keys
    _bundle(tmp_path, "signed.tar.gz", builder)
    r = provision("bundle", "--verify", "signed.tar.gz", "--signed-by", builder, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["signed_by"] == builder
    r = provision("bundle", "--verify", "signed.tar.gz", "--signed-by", stranger, cwd=tmp_path)
    assert r.returncode == 1 and f"signed by key {builder}, not {stranger}" in r.stderr
    r = provision("plan", "--assume", "os=debian-12,python=3.11,name=a", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = provision(
        "bundle", "provision.lock", "-o", "x.tar.gz", "--sign", "nobody@example.invalid", cwd=tmp_path, offline=True
    )
    assert r.returncode == 2 and "gpg cannot sign with --sign nobody@example.invalid" in r.stderr, r.stderr
    assert not list(tmp_path.glob("*x.tar.gz*"))
    r = provision("up", "--local", "--signed-by", builder, "--yes", cwd=tmp_path)
    assert r.returncode == 2 and "--signed-by checks a bundle: it goes with --bundle" in r.stderr
