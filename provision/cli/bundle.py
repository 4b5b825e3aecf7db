"""`provision bundle`: one file holding what a lock's hosts install, for sites with no network.

Exit status: 0 written (or, with --verify, every member matches the MANIFEST); 1 a download
failed, or --verify found a member that does not match (named); 2 bad input (no such lock or
bundle, not a bundle, a lock a bundle cannot carry yet).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from provision.cli.options import command_options, config_option, parse_sets, set_option
from provision.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from rich.console import Console


@click.command(name="bundle")
@click.argument("lock_arg", metavar="[LOCK]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="The lock to bundle."
)
@click.option(
    "-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), metavar="BUNDLE", help="Write here."
)
@click.option(
    "--verify",
    "verify_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="BUNDLE",
    help="Check every file of BUNDLE against its MANIFEST (no host, no network).",
)
@click.option(
    "--kernel",
    "kernels",
    multiple=True,
    metavar="RELEASE",
    help="A kernel the hosts run (uname -r): its headers, for a driver DKMS builds; repeatable.",
)
@click.option(
    "--sign", "sign_key", metavar="KEY", help="Sign the MANIFEST with this gpg key of your keyring (MANIFEST.asc)."
)
@click.option(
    "--signed-by",
    "signed_by",
    metavar="FINGERPRINT",
    help="With --verify: the MANIFEST must carry a good signature by the key of this fingerprint.",
)
@config_option("provision.yaml: its install settings (the indexes the wheels come from).")
@set_option("A role variable the hosts get, as `plan --set` gave it (the wheels' sources); repeatable.")
@command_options
def bundle(
    *,
    lock_arg: Path | None,
    lock_path: Path | None,
    output: Path | None,
    verify_path: Path | None,
    kernels: tuple[str, ...],
    sign_key: str | None,
    signed_by: str | None,
    config_path: Path | None,
    sets: tuple[str, ...],
    as_json: bool,
) -> int:
    """Write one file (a tar.gz with a sha256 MANIFEST) holding the lock, the OS packages its
    plays install with their dependencies (a signed apt repository), each group's wheel closure by
    the lock's hashes, uv's wheel by hash, the roles and the smoke job, to carry to sites with no
    network (`provision up --bundle FILE` installs from it); or, with --verify, check one.

    Exit status: 0 written or verified, 1 a download failed or a file does not match its
    MANIFEST (named), 2 bad input.
    """
    from provision.cli.output import emit  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cli.output)

    if verify_path is not None:
        if lock_arg or lock_path or output or sets or sign_key or kernels:
            raise BadInput(
                "--verify takes no lock, -o, --set, --kernel or --sign",
                "run `provision bundle --verify BUNDLE [--signed-by FPR]`",
            )
        from provision.fleet.bundle_file import verify_bundle  # noqa: PLC0415 (start-up: as above)

        checked = verify_bundle(verify_path, signed_by)
        doc: dict[str, Any] = {
            "ok": True,
            "bundle": str(checked.path),
            "files": checked.files,
            "bytes": checked.size,
            "manifest_sha256": checked.manifest_sha256,
            "info": checked.info,
            "signed_by": checked.signer,
        }
        signed = f", signed by {checked.signer}" if checked.signer else ""
        emit(doc, as_json, lambda con: con.print(f"{checked.path}: {checked.files} files match the MANIFEST{signed}"))
        return int(ExitCode.OK)
    if signed_by is not None:
        raise BadInput("--signed-by checks a bundle: it goes with --verify", "sign with --sign KEY")
    lock_file = _one_lock(lock_arg, lock_path)
    if output is None:
        raise BadInput("no output file", "pass -o BUNDLE, e.g. -o site.bundle.tar.gz")
    from provision.config import Config, load_config  # noqa: PLC0415 (start-up: as above)
    from provision.files import read_lock  # noqa: PLC0415 (start-up: as above)
    from provision.fleet.bundle import build  # noqa: PLC0415 (start-up: as above)

    config = load_config(config_path) if config_path is not None else Config()
    overrides = parse_sets(sets)
    lock = read_lock(lock_file)
    if not output.parent.is_dir():
        raise BadInput(f"no folder {output.parent} to write the bundle in", "create it or pick another -o")

    def say(msg: str) -> None:
        sys.stderr.write(msg + "\n")

    signer = None
    if sign_key is not None:
        from provision.fleet.bundle_sign import sign  # noqa: PLC0415 (start-up: as above)

        sign(b"provision bundle --sign: the key signs\n", sign_key)  # a key that cannot sign: before any download

        def signer(manifest: bytes) -> bytes:
            return sign(manifest, sign_key)

    built = build(
        lock,
        lock_file,
        config.install,
        output,
        python_exe=sys.executable,
        overrides=overrides,
        say=say,
        sign=signer,
        kernels=kernels,
    )
    doc = {
        "ok": True,
        "bundle": str(built.path),
        "sha256": built.sha256,
        "bytes": built.size,
        "manifest_sha256": built.manifest_sha256,
        "parts": built.parts,
        "info": built.info,
    }
    emit(doc, as_json, lambda con: _human(con, doc))
    return int(ExitCode.OK)


def _one_lock(lock_arg: Path | None, lock_path: Path | None) -> Path:
    if lock_arg is not None and lock_path is not None and lock_arg != lock_path:
        raise BadInput("two locks given (LOCK and --lock)", "pass one")
    lock = lock_arg or lock_path
    if lock is None:
        raise BadInput("no lock to bundle", "pass LOCK or --lock FILE (provision plan writes provision.lock)")
    return lock


def _human(con: Console, doc: dict[str, Any]) -> None:
    parts = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(doc["parts"].items()))
    con.print(f"wrote {doc['bundle']} ({doc['bytes'] / 1e6:.1f} MB, sha256 {doc['sha256']})")
    con.print(f"  for {', '.join(doc['info']['os'])} on {', '.join(doc['info']['arch'])}: {parts}")
