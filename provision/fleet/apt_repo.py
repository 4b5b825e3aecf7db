"""A flat apt repository of ``.deb`` files in one folder, indexed and signed with a key made for it.

A bundle's OS packages reach its hosts this way (``deb [signed-by=KEY] file:FOLDER ./``), and the
tests' stand-in NVIDIA repository is built with it. The layout is Debian's "flat repository
format" (https://wiki.debian.org/DebianRepository/Format#Flat_Repository_Format): ``Packages``
(and ``Packages.gz``) beside the files, and an ``InRelease`` that lists their sha256 and is
clear-signed; apt then checks every ``.deb`` against the sha256 that ``Packages`` gives it.

The key is a fresh ed25519 signing key in a throwaway gpg home: only its public half leaves
(armored, which apt's ``signed-by`` reads from a file named ``*.asc``: sources.list(5),
"Signed-By"), with its fingerprint. The home is removed with its agent, so no secret outlives
the build.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from provision.errors import BadInput, OperationFailed

_GPG = ("gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "")


@dataclass(frozen=True)
class SignedRepo:
    folder: Path
    key: Path  # the armored public key, inside folder
    fingerprint: str


def need_tools() -> None:
    """BadInput naming the first missing program: what indexing and signing run."""
    for tool, package in (("dpkg-scanpackages", "dpkg-dev"), ("gpg", "gnupg"), ("gpgconf", "gnupg")):
        if shutil.which(tool) is None:
            raise BadInput(f"{tool} is not installed on this machine", f"install it: apt-get install {package}")


def index_and_sign(folder: Path, *, label: str, key_file: str) -> SignedRepo:
    """Write ``Packages``, ``Packages.gz``, ``Release`` and ``InRelease`` for the ``.deb`` files in
    ``folder``, signed with a new key saved (armored) as ``folder/key_file``. The gpg home is a
    temporary folder of its own, never in the folder a host reads."""
    need_tools()
    packages = _run(["dpkg-scanpackages", "-m", "."], cwd=folder).stdout
    (folder / "Packages").write_text(packages)
    # mtime 0: the same .deb files give the same Packages.gz
    (folder / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    lines = [
        f"Origin: {label}",
        f"Label: {label}",
        "Architectures: amd64 arm64 all",
        f"Date: {formatdate(usegmt=True)}",
    ]
    lines.append("SHA256:")
    for name in ("Packages", "Packages.gz"):
        data = (folder / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (folder / "Release").write_text("\n".join(lines) + "\n")
    # the home in the system's temporary folder: gpg-agent's socket lives in it, and a Unix socket's
    # path has at most 107 bytes (unix(7), sun_path), which a deep scratch folder overruns
    with tempfile.TemporaryDirectory(prefix="provision-gpg-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        try:
            _run([*_GPG, "--quick-gen-key", f"{label} <bundle@provision.invalid>", "ed25519", "sign", "never"], env=env)
            colons = _run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env).stdout
            fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
            key = folder / key_file
            key.write_text(_run(["gpg", "--batch", "--armor", "--export", fingerprint], env=env).stdout)
            (folder / "InRelease").unlink(missing_ok=True)
            _run([*_GPG, "--clearsign", "-o", str(folder / "InRelease"), str(folder / "Release")], env=env)
        finally:  # the agent gpg started for this home must not outlive it
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    return SignedRepo(folder, key, fingerprint)


def _run(
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise OperationFailed(
            f"{argv[0]} failed: {last[:200]}", "see the message above; the repository was not written"
        )
    return r
