"""``provision up --bundle``: the bundle on each host, and the role variables that install from it
with no network at all.

Before any host is contacted the controller checks the whole file against its MANIFEST
(:func:`open_bundle`) and applies the lock inside it. Then, for each host the run applies to,
:func:`stage`:

1. copies the file once per host, resuming a copy an earlier run left part way (SFTP, appending
   from the size already there), to ``/var/lib/provision/bundles/<sha256>.tar.gz.part``; a host
   that has it unpacked already gets nothing;
2. checks the copy's sha256 on arrival, unpacks it next to it (``<sha256>/``, the tarball then
   removed: a host holds each bundle once) and checks every
   member with ``sha256sum -c --strict`` against the MANIFEST, on every run, before anything is
   installed: a host with a damaged copy fails alone, naming the file, and nothing is changed;
3. writes an apt configuration of the bundle's own (``<sha256>.apt/apt.conf``) whose only source
   is the bundle's signed repository for the host's OS release (``file:``, trusted through the
   bundle's key alone), with its own lists folder, so the host's sources and lists stay as they
   are, and reads its index (``apt-get update``, from the file system).

The play then runs with ``APT_CONFIG`` pointing at that configuration (apt reads the file named
there first, then its parts and main file: apt.conf(5), "the file specified by the APT_CONFIG
environment variable (if any)"), with no proxy in its environment, pip told ``--no-index
--find-links`` the bundle's wheels and uv ``UV_OFFLINE`` (a standalone CPython from the bundle's own
download list and folder: :mod:`provision.fleet.bundle_python`): nothing a role runs has a network
source to use.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput, OperationFailed, ProvisionError
from provision.files import private_dir, replace_file
from provision.fleet import bundle_python
from provision.fleet.bundle_apt import KEY_FILE
from provision.fleet.bundle_file import LOCK, verify_bundle
from provision.model.packages import ROLES as PACKAGE_ROLES

if TYPE_CHECKING:
    from provision.fleet.verify import Connect
    from provision.hosts.inventory import HostTarget
    from provision.hosts.transport import Transport

ROOT = "/var/lib/provision/bundles"
BUNDLE_TASK = "(bundle)"
_BLOCK = 1 << 20
# the play environment's names that reach a network or a proxy's login: render's proxy variables
# and the credential files' (provision.ansible.settings.Credentials.environment)
_DROPPED = ("http_proxy", "https_proxy", "PIP_CONFIG_FILE", "NETRC", "APT_CONFIG")


@dataclass(frozen=True)
class Bundle:
    """A bundle whose every member matched its MANIFEST on the controller."""

    path: Path
    sha256: str
    size: int
    info: dict[str, Any]

    @property
    def where(self) -> str:
        """Where it is unpacked on a host."""
        return f"{ROOT}/{self.sha256}"

    def group(self, name: str) -> Mapping[str, Any]:
        groups = self.info.get("groups") or {}
        return groups.get(name) or {}

    def describe(self) -> str:
        """``debian-12 on x86_64``: what the bundle is for."""
        return f"{', '.join(self.info.get('os') or [])} on {', '.join(self.info.get('arch') or [])}"


def open_bundle(path: Path, workdir: Path, signed_by: str | None = None) -> tuple[Bundle, Path]:
    """Check ``path`` against its MANIFEST (every byte of every member; with ``signed_by``, the
    MANIFEST's signature too) and write the lock it holds to ``workdir``; the bundle and that
    lock's path."""
    checked = verify_bundle(path, signed_by)
    workdir = workdir / checked.sha256[:16]
    private_dir(workdir.parent)
    private_dir(workdir)
    lock_path = workdir / LOCK
    replace_file(lock_path, checked.lock.decode())
    return Bundle(path, checked.sha256, path.stat().st_size, checked.info), lock_path


def mismatch(exc: BadInput, bundle: Bundle) -> BadInput:
    """A host that does not fit the bundle's lock, said as a bundle's refusal."""
    return BadInput(
        f"{exc.message} (the bundle {bundle.path.name} is for {bundle.describe()})",
        "build a bundle from a lock planned for these hosts",
    )


def host_vars(bundle: Bundle, group: str, environment: Mapping[str, str]) -> dict[str, Any]:
    """The role variables that make one host's play install from the unpacked bundle only."""
    entry = bundle.group(group)
    where = bundle.where
    env = {k: v for k, v in environment.items() if k not in _DROPPED}
    # uv's "Disable network access" (https://docs.astral.sh/uv/reference/environment/#uv_offline)
    env["UV_OFFLINE"] = "1"
    out: dict[str, Any] = {"python_env_python_mirror": "", "python_env_upgrade_pip": False}
    if entry.get("apt"):
        env["APT_CONFIG"] = f"{where}.apt/apt.conf"
        # the plan's repositories' packages are in the bundle's: none is added (nor its key fetched)
        out.update({f"{role}_repositories": [] for role in PACKAGE_ROLES})
    if entry.get("wheels"):
        out["frameworks_find_links"] = [f"{where}/{entry['wheels']}"]
        out["frameworks_no_index"] = True
        out["frameworks_extra_index_urls"] = []
        out["frameworks_index_url"] = ""
    if entry.get("uv"):
        out["python_env_pip_args"] = ["--no-index", f"--find-links={where}/{entry['uv']}"]
    if entry.get("standalone_python"):
        out.update(bundle_python.host_sources(where))
    out["provision_environment"] = env
    return out


def stage(
    bundle: Bundle,
    targets: Sequence[HostTarget],
    group_of: Mapping[str, str],
    connect: Connect,
    say: Callable[[str], None],
) -> dict[str, str]:
    """Copy, check and unpack the bundle on each host; host -> why it failed (the others are ready)."""
    if not targets:
        return {}

    def one(t: HostTarget) -> tuple[str, str | None]:
        try:
            _stage_one(bundle, t, bundle.group(group_of.get(t.name, "")).get("apt"), connect, say)
        except ProvisionError as exc:
            return t.name, exc.reason()
        except OSError as exc:  # the SSH connection or SFTP
            return t.name, f"copying the bundle failed: {exc}"
        return t.name, None

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        done = list(pool.map(one, targets))
    return {name: why for name, why in done if why is not None}


def _stage_one(
    bundle: Bundle, target: HostTarget, apt: str | None, connect: Connect, say: Callable[[str], None]
) -> None:
    t = connect(target)
    try:
        uid, _, home = t.run('printf "%s %s" "$(id -u)" "$HOME"', timeout=60).stdout.partition(" ")
        have = t.run(["test", "-d", bundle.where], sudo=True, timeout=60).ok
        if have:  # unpacked by an earlier run: checked again below, nothing sent
            src = ""
        else:
            # a root login copies into the bundles folder itself; any other into its own home,
            # from where root copies it (a file the login can still write is never the one checked)
            part_dir = ROOT if uid == "0" else f"{home.strip()}/.provision-bundles"
            t.run(["mkdir", "-p", part_dir], timeout=60)
            src = f"{part_dir}/{bundle.sha256}.tar.gz.part"
            sent = _send(t, bundle.path, src)
            say(f"{target.name}: bundle copied ({sent / 1e6:.1f} MB sent)")
        r = t.run(_script(bundle, src, apt), sudo=True, timeout=1800)
        if not r.ok:
            last = (r.stdout.strip().splitlines() or r.stderr.strip().splitlines() or [f"exit {r.exit_status}"])[-1]
            raise OperationFailed(f"the bundle on this host: {last[:300]}", "")
    finally:
        t.close()


def _send(t: Transport, local: Path, remote: str) -> int:
    """Copy ``local`` to ``remote``, resuming what an earlier copy left there; the bytes sent."""
    client = getattr(t, "client", None)
    total = local.stat().st_size
    if client is None:  # this machine (--local): a plain copy
        t.put(local, remote, 0o600)
        return total
    with client.open_sftp() as sftp:
        try:
            start = sftp.stat(remote).st_size or 0
        except OSError:
            start = 0
        if start > total:
            start = 0
        with local.open("rb") as src, sftp.open(remote, "ab" if start else "wb") as dst:
            dst.set_pipelined(True)
            if start:
                src.seek(start)
            sftp.chmod(remote, 0o600)
            while block := src.read(_BLOCK):
                dst.write(block)
    return total - start


def _script(bundle: Bundle, src: str, apt: str | None) -> str:
    """The root shell script that checks and unpacks the copy (exit 3: the copy, 4: a member,
    5: apt cannot read the repository, 6: unpacking failed)."""
    q = shlex.quote
    d, final = bundle.where, f"{ROOT}/{bundle.sha256}.tar.gz"
    lines = [
        "set -eu",
        "umask 022",
        f"mkdir -p {ROOT}",
        f"if [ ! -d {d} ]; then",
        f"  if [ {q(src)} != {final}.part ]; then cp -- {q(src)} {final}.part; rm -f -- {q(src)}; fi",
        # the copy's sha256 and its unpacking read it side by side (two cores, one pass from the page cache)
        f"  rm -rf {d}.part && mkdir {d}.part",
        f"  sha256sum < {final}.part > {d}.sha256 &",
        f"  if tar -xzf {final}.part -C {d}.part --no-same-owner 2> {d}.tar-err; then t=0; else t=$?; fi",
        f'  wait $!; got=$(cut -d" " -f1 {d}.sha256); rm -f {d}.sha256',
        f'  if [ "$got" != {bundle.sha256} ]; then rm -rf {final}.part {d}.part {d}.tar-err;'
        f' echo "the copied bundle\'s sha256 is $got, not {bundle.sha256}: copied again on the next run"; exit 3; fi',
        # unpacked, the tarball is not kept: a host holds each bundle once
        f'  if [ "$t" != 0 ]; then echo "unpacking the bundle failed: $(tail -n 1 {d}.tar-err)";'
        f" rm -rf {d}.part {d}.tar-err; exit 6; fi",
        f"  rm -f {d}.tar-err; mv {d}.part {d} && rm -f {final}.part",
        "fi",
        f"cd {d}",
        "if ! out=$(sha256sum -c --strict --quiet MANIFEST 2>&1); then",
        "  bad=$(printf '%s\\n' \"$out\" | sed -n 's/: FAILED.*$//p' | head -n 1)",
        f'  echo "bundle member ${{bad:-MANIFEST}} does not match its sha256 in the MANIFEST ({d}): nothing was'
        f' installed; copied again on the next run"; rm -rf {d}; exit 4',
        "fi",
    ]
    if apt:
        a = f"{d}.apt"
        conf = (
            f'Dir::Etc::SourceList "{a}/sources.list";\\n'
            f'Dir::Etc::SourceParts "{a}/parts";\\n'
            f'Dir::State::Lists "{a}/lists";\\n'
            'Acquire::Languages "none";\\n'
        )
        lines += [
            f"mkdir -p {a}/lists/partial {a}/parts",
            f"printf '%s\\n' 'deb [signed-by={d}/{apt}/{KEY_FILE}] file:{d}/{apt} ./' > {a}/sources.list",
            f"printf '{conf}' > {a}/apt.conf",
            f'out=$(APT_CONFIG={a}/apt.conf apt-get -q update 2>&1) || {{ echo "$out" | tail -n 1; exit 5; }}',
            'if echo "$out" | grep -q "^[WE]:"; then echo "$out" | grep "^[WE]:" | head -n 1; exit 5; fi',
        ]
    return "\n".join(lines) + "\n"
