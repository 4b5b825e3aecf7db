#!/usr/bin/python
"""Ansible module: from a downloaded key file, write a keyring holding exactly the pinned key.

Why build the keyring instead of checking the file and installing it as it came: apt's
`signed-by` and dnf's `gpgkey` trust EVERY key in the file they name. A file that carries the
pinned key plus another one passes a "the pinned fingerprint is among its keys" check, and the
repository may then be signed by the other key. Refusing files with more than one primary key
would also close that, but it would still install bytes gpg never vetted (an unbound subkey, a
key that carries the pinned key's material as its own subkey) and would break the day a vendor
ships its old and new key side by side during a rotation. So the file is imported into a
throwaway gpg home (import checks every self-signature and drops subkeys without a valid
binding), exactly the pinned primary key is exported with its own subkeys and user IDs, and the
export is imported once more into a second throwaway home: it must hold that one primary key
and nothing else, or nothing is written.

Runs on the managed host (Debian/Ubuntu apt, RHEL/Rocky/Amazon Linux dnf): stdlib and gpg only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: signed_repo_key
short_description: Write a keyring that holds exactly the pinned OpenPGP key of a key file
description:
  - Imports O(src) into a throwaway gpg home, checks that O(fingerprint) is one of its primary
    keys, and writes the armored export of exactly that key (with its subkeys) to O(dest).
  - Other primary keys in O(src) are left out and returned in RV(dropped).
options:
  src: {description: Downloaded key file (armored or binary)., type: path, required: true}
  dest: {description: Keyring file to write (armored)., type: path, required: true}
  fingerprint: {description: Pinned primary key fingerprint (spaces allowed)., type: str, required: true}
  label: {description: "Subject of the failure message (\"nvidia_driver: the key at URL\")", type: str, default: ''}
  mode: {description: Mode of O(dest)., type: raw, default: '0644'}
"""

RETURN = r"""
fingerprint: {description: The pinned fingerprint, normalised., type: str, returned: success}
dropped: {description: Fingerprints of the other primary keys in src, left out., type: list, returned: always}
"""


@dataclass
class Extracted:
    """What a key file holds and the keyring built from it (``keyring`` empty when refused)."""

    primaries: list[str] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    keyring: bytes = b""
    error: str = ""


def normalise(fingerprint: str) -> str:
    return fingerprint.replace(" ", "").upper()


def _gpg(home: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    # --no-autostart: public keys need no agent, and none may outlive the throwaway home
    cmd = ["gpg", "--homedir", home, "--batch", "--no-tty", "--no-autostart", "--no-options", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, check=False)


def _primaries(home: str) -> tuple[list[str], list[str]]:
    """Primary key fingerprints in the home's keyring, and those of them that are revoked.

    In gpg's colon listing a primary key is a `pub` record; the `fpr` record right after it is
    its fingerprint (a `sub` record's `fpr` is a subkey's, which must not count as the pin).
    """
    out = _gpg(home, "--with-colons", "--fixed-list-mode", "--list-keys").stdout.decode(errors="replace")
    primaries: list[str] = []
    revoked: list[str] = []
    previous: list[str] = []
    for line in out.splitlines():
        fields = line.split(":")
        if fields[0] == "fpr" and previous and previous[0] == "pub":
            primaries.append(fields[9].upper())
            if previous[1] == "r":
                revoked.append(fields[9].upper())
        previous = fields
    return primaries, revoked


def extract(src: str, fingerprint: str) -> Extracted:
    """The armored keyring holding exactly ``fingerprint`` from the key file ``src``."""
    pinned = normalise(fingerprint)
    result = Extracted()
    if len(pinned) not in (40, 64) or any(c not in "0123456789ABCDEF" for c in pinned):
        result.error = f"cannot be checked: the pinned fingerprint {fingerprint!r} is not a full one (40 or 64 hex)"
        return result
    homes = [tempfile.mkdtemp(prefix="provision-key-") for _ in range(2)]
    try:
        with open(src, "rb") as fh:
            data = fh.read()
        # the exit status is not the verdict: gpg returns 2 when it skipped a part of the file it
        # could not use, having imported the rest; what was imported is listed next
        imported = _gpg(homes[0], "--import", stdin=data)
        result.primaries, result.revoked = _primaries(homes[0])
        if pinned not in result.primaries:
            gpg_said = " ".join(imported.stderr.decode(errors="replace").split())
            found = ", ".join(result.primaries) or f"no usable key: {gpg_said}"
            result.error = f"does not have the pinned fingerprint {pinned} as a primary key (it has {found})"
            return result
        if pinned in result.revoked:
            result.error = f"has the pinned key {pinned} revoked"
            return result
        exported = _gpg(homes[0], "--armor", "--export-options", "export-clean", "--export", pinned).stdout
        _gpg(homes[1], "--import", stdin=exported)
        again, _ = _primaries(homes[1])
        if again != [pinned]:
            # another key that carries the pinned key's material as a subkey matches the pin too
            result.error = (
                f"gives {', '.join(again) or 'nothing'} when {pinned} alone is exported from it "
                "(another key carries the pinned key's material)"
            )
            return result
        result.keyring = exported
        return result
    finally:
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "label": {"type": "str", "default": ""},
            "mode": {"type": "raw", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if shutil.which("gpg") is None:
        missing = "cannot be checked: gpg is missing (install gnupg, then run again)"
        module.fail_json(msg=f"{params['label']} {missing}".lstrip())
    result = extract(params["src"], params["fingerprint"])
    dropped = [f for f in result.primaries if f != normalise(params["fingerprint"])]
    if result.error:
        module.fail_json(msg=f"{params['label']} {result.error}; check the mirror".lstrip(), dropped=dropped)
    dest = params["dest"]
    current = b""
    if os.path.exists(dest):
        with open(dest, "rb") as fh:
            current = fh.read()
    changed = current != result.keyring
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest) or ".", prefix=".provision-key-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(result.keyring)
        module.atomic_move(tmp, dest)
    file_args = module.load_file_common_arguments(params)
    if not module.check_mode or os.path.exists(dest):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    module.exit_json(changed=changed, fingerprint=normalise(params["fingerprint"]), dropped=dropped, dest=dest)


if __name__ == "__main__":
    main()
