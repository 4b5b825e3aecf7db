"""reference/bundle.md: the bundle file of `provision bundle`, its layout and its MANIFEST, from
provision/fleet/bundle_file.py, with a real (small) bundle written and checked during the build."""

from __future__ import annotations

import inspect
import tarfile
import tempfile
from pathlib import Path

from refdocs.md import RefDocError, code, generated


def page() -> str:
    from provision.fleet import bundle_file
    from provision.fleet.bundle_file import INFO, MANIFEST, SCHEMA, verify_bundle, write_bundle

    doc = inspect.cleandoc(bundle_file.__doc__ or "")
    layout = doc.split("::", 1)[1].split("\n\n", 2)[1]
    with tempfile.TemporaryDirectory() as tmp:
        lock = Path(tmp) / "provision.lock"
        lock.write_text('{"schema": "provision.lock/2"}\n')
        out = Path(tmp) / "example.tar.gz"
        write_bundle(out, {"provision.lock": lock}, {"schema": SCHEMA, "os": ["debian-12"], "arch": ["x86_64"]})
        checked = verify_bundle(out)
        with tarfile.open(out) as tar:
            names = tar.getnames()
            manifest = tar.extractfile(MANIFEST).read().decode()  # type: ignore[union-attr]
    if names[0] != MANIFEST or checked.files != 2:
        raise RefDocError(f"bundle.md: the example bundle has members {names}")
    return "".join(
        [
            "# Bundle file\n\n",
            generated("`provision/fleet/bundle_file.py` (its docstring and a bundle written and verified with it)"),
            "`provision bundle LOCK -o FILE` writes one gzip-compressed tarball holding what the lock's hosts "
            "install; `provision bundle --verify FILE` checks it without a host, and `provision up --bundle FILE` "
            "installs from it alone. See the [air-gapped tutorial](../tutorials/air-gapped.md).\n\n",
            "## Layout\n\nEvery member is a plain file (no folders, links or devices):\n\n",
            code(inspect.cleandoc(layout)),
            f"\n## `{MANIFEST}`\n\n",
            f"The first member. One line per other member, `<sha256 in 64 lower-case hex>  <path>` (two spaces), "
            "sorted by path: GNU coreutils' `sha256sum` check format, so an unpacked bundle checks with "
            f"`sha256sum -c --strict {MANIFEST}` alone ([coreutils manual, md5sum invocation]"
            "(https://www.gnu.org/software/coreutils/manual/html_node/md5sum-invocation.html)). "
            "Paths are relative with no `..`; a line that is not of this form makes the bundle bad input.\n\n",
            "`--verify` reads the tarball once and refuses, naming the first such member: a member whose sha256 "
            "differs from its line, a member the MANIFEST does not list, a listed member the tarball lacks, or "
            "a member that is not a plain file with a relative path (exit 1). A file that is not a tarball, "
            "or one without a MANIFEST first, is not a bundle (exit 2).\n\n",
            "## `MANIFEST.asc` (`--sign`)\n\n",
            "`provision bundle --sign KEY` signs the MANIFEST with a key of the builder's gpg keyring: an "
            "armored detached signature, the member right after the MANIFEST (which cannot list its own "
            "signature; a host's `sha256sum -c` never reads it). `bundle --verify FILE --signed-by FINGERPRINT` "
            "and `up --bundle FILE --signed-by FINGERPRINT` then require a good signature by the key of that "
            "full fingerprint (or by a subkey of it), from the user's own keyring: the bundle never brings the "
            "key that vouches for it. An unsigned bundle, a signature by another key, or a MANIFEST changed "
            "after signing is exit 1; a signer's key missing from the keyring or a short fingerprint is "
            "exit 2.\n\n",
            f"## `{INFO}`\n\n",
            f"JSON, schema `{SCHEMA}`: `lock_sha256` (of the `provision.lock` member), `os` and `arch` (the OS "
            "releases and CPUs of the lock's groups), `groups` (per group: `os`, `arch`, `hosts`, `wheels` "
            "(its folder, null without frameworks), `python`, `uv`, `apt` (its repository's folder), "
            "`standalone_python` (the CPython archive's member, where the lock installs one)), `apt` "
            "(per repository folder: `key`, the armored public key's member, `fingerprint`, and `names`, what "
            "the plays install from it; the folder also holds the names' whole dependency closure), `kernels` "
            "(the `--kernel` releases whose headers it holds).\n\n",
            "## On a host (`up --bundle`)\n\n",
            "The controller checks every member first (as `--verify`). Each host the run applies to gets the "
            "file once, over SFTP, resumed where an earlier copy stopped, as "
            "`/var/lib/provision/bundles/<sha256>.tar.gz.part` (a login other than root copies into its own "
            "`~/.provision-bundles/`, from where root copies it); its sha256 is checked on arrival, it is "
            "unpacked to `/var/lib/provision/bundles/<sha256>/` (the tarball then removed) and every member is "
            "checked with `sha256sum -c --strict MANIFEST`, on every run, before anything is installed. "
            "`/var/lib/provision/bundles/<sha256>.apt/` holds the apt configuration the play runs with "
            "(`APT_CONFIG`): the bundle's repository as its only source, trusted through the bundle's key "
            "alone, and its own lists folder, so the host's sources and lists are left as they were. A standalone "
            "CPython comes from the unpacked bundle too: python_env runs uv with `python/downloads.json` as its "
            "download list and `file://<the unpacked bundle>/python` as its python-install-mirror, offline, and "
            "uv checks the archive's sha256 against that list again. Remove "
            "a folder there once no lock needs it.\n\n",
            "## Same lock, same bytes\n\n",
            "Members are written sorted by path with mtime 0, owner and group 0 without names, modes "
            "0644/0755, and gzip's header carries no time or file name: building the same lock again gives "
            "the same file, so its sha256 can be published. A bundle with OS packages is the exception: its "
            "repository is signed with a key made for that build, so its `Release`, `InRelease`, key and "
            "`bundle.json` differ each time (and its packages are what the archive serves on the day).\n\n",
            "## Example MANIFEST\n\nOf a bundle of a lock alone, written while this page was built:\n\n",
            code(manifest),
        ]
    )
