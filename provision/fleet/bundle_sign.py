"""``provision bundle --sign KEY`` and ``--signed-by FINGERPRINT``: the bundle's MANIFEST signed with
the user's own gpg key, and checked against a fingerprint the user gives where the bundle is used.

The signature is an armored detached one (``gpg --detach-sign --armor``), the member
``MANIFEST.asc`` right after ``MANIFEST``, which it signs: the MANIFEST holds the sha256 of every
other member, so a good signature over it vouches for the whole bundle. ``MANIFEST.asc`` cannot be
in the MANIFEST it signs, and a host's ``sha256sum -c MANIFEST`` never reads it.

The check trusts the fingerprint, not gpg's web of trust (as apt's ``signed-by`` trusts one key):
gpg must report a good signature (``GOODSIG``) whose key's fingerprint, or its primary key's, is
the one given (``VALIDSIG``: gpg's doc/DETAILS, "Format of the --status-fd output"). The public
key comes from the user's keyring (``GNUPGHOME`` as gpg reads it): a bundle never brings the key
that vouches for it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from provision.errors import BadInput, OperationFailed

SIGNATURE = "MANIFEST.asc"
_FPR = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")


def fingerprint(text: str) -> str:
    """A full key fingerprint as given (spaces allowed, any case), upper-case without spaces."""
    fpr = text.replace(" ", "").upper()
    if not _FPR.fullmatch(fpr):
        raise BadInput(
            f"--signed-by {text!r} is not a full key fingerprint",
            "give all 40 hex digits: gpg --fingerprint KEY prints them",
        )
    return fpr


def _gpg() -> str:
    gpg = shutil.which("gpg")
    if gpg is None:
        raise BadInput("gpg is not installed on this machine", "install it: apt-get install gnupg")
    return gpg


def sign(manifest: bytes, key: str) -> bytes:
    """The armored detached signature of ``manifest`` by ``key`` (a secret key of the user's keyring)."""
    r = subprocess.run(
        [_gpg(), "--batch", "--armor", "--detach-sign", "--local-user", key, "--output", "-"],
        input=manifest,
        capture_output=True,
        check=False,
    )
    if r.returncode != 0 or not r.stdout:
        last = (r.stderr.decode(errors="replace").strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise BadInput(
            f"gpg cannot sign with --sign {key}: {last[:200]}",
            "give a secret key of your keyring (gpg --list-secret-keys)",
        )
    return r.stdout


def check(manifest: bytes, signature: bytes, given: str) -> str:
    """Check ``signature`` over ``manifest`` against the fingerprint ``given``; the signer's
    primary key fingerprint. OperationFailed when the bundle is unsigned or signed otherwise."""
    want = fingerprint(given)
    if not signature:
        raise OperationFailed("the bundle is not signed (no MANIFEST.asc)", "ask for a bundle built with --sign")
    with tempfile.TemporaryDirectory(prefix="provision-sig-") as tmp:
        sig = Path(tmp) / SIGNATURE
        sig.write_bytes(signature)
        r = subprocess.run(
            [_gpg(), "--batch", "--status-fd", "1", "--verify", str(sig), "-"],
            input=manifest,
            capture_output=True,
            check=False,
        )
    status = [line.split() for line in r.stdout.decode(errors="replace").splitlines() if line.startswith("[GNUPG:] ")]
    names = {s[1] for s in status if len(s) > 1}
    if "NO_PUBKEY" in names:
        raise BadInput(
            "the key that signed the bundle is not in your gpg keyring",
            "import the signer's public key (gpg --import) and compare its fingerprint with --signed-by",
        )
    valid = next((s for s in status if len(s) > 2 and s[1] == "VALIDSIG"), None)
    if r.returncode != 0 or "GOODSIG" not in names or valid is None:
        raise OperationFailed(
            "the bundle's MANIFEST.asc is not a good signature of its MANIFEST",
            "the MANIFEST or its signature was changed; build and sign the bundle again",
        )
    signer, primary = valid[2], (valid[11] if len(valid) > 11 else valid[2])
    if want not in (signer, primary):
        raise OperationFailed(
            f"the bundle is signed by key {primary}, not {want}",
            "check who built it; pass the fingerprint of the key you trust",
        )
    return primary
