"""The wheelhouse: which wheels one host group's frameworks role installs (:class:`WheelSet`, its
``pip download`` commands for the hosts' platform), the controller's netrc for them, and the
read-only HTTP server the hosts fetch them from.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, AnyStr, BinaryIO, cast

from provision.ansible.settings import pip_sources

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from _typeshed import SupportsRead, SupportsWrite


# Wheels for the hosts' platform: manylinux up to the oldest glibc among the OS releases the
# tool supports (RHEL 8's 2.28), so a wheel taken here installs on every one of them.
MANYLINUX_MAX_MINOR = 28
MANYLINUX_MIN_MINOR = 17
# The controller's own pip settings are not the hosts' sources: `--isolated` makes pip ignore the
# PIP_* environment variables and the user's pip.conf (pip's src/pip/_internal/configuration.py:
# Configuration(isolated) skips _load_environment_vars and the user files), so a find-links
# folder there (this test machine's has a real torch of the locked version, another file) is
# never where a locked wheel comes from; plan's resolver runs the same way (matrix/pypi.py).
_ISOLATED = ("--isolated",)


def wheel_platforms(arch: str) -> list[str]:
    """``pip download --platform`` values for a glibc Linux host of ``arch``."""
    tags = [f"manylinux_2_{m}_{arch}" for m in range(MANYLINUX_MAX_MINOR, MANYLINUX_MIN_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{arch}"]


@dataclass(frozen=True)
class WheelSet:
    """What one host group's frameworks role installs, as the rendered group_vars say."""

    python: str  # "3.11"
    arch: str  # "x86_64"
    installs: tuple[tuple[tuple[str, ...], str], ...]  # (packages, index_url or "")
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    no_index: bool = False
    # the lock's wheel closure as the role gets it (frameworks_locked): (index_url or "", hashed lines)
    locked: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # the indexes' logins (netrc text; render keeps them out of the URLs): pip reads them from
    # the file NETRC names, never from its command line, which `ps` shows to everyone
    netrc: str = field(default="", repr=False)

    @property
    def key(self) -> str:
        """The wheelhouse folder: one per interpreter and platform, shared by every run."""
        return f"cp{self.python.replace('.', '')}-{self.arch}"

    @classmethod
    def from_group_vars(
        cls, data: Mapping[str, Any], *, python: str | None, arch: str | None, netrc: str = ""
    ) -> WheelSet | None:
        """The wheels a group's role variables (``data``) install on hosts of ``python`` and
        ``arch``; None where the group installs no frameworks or its platform is unknown."""
        installs = data.get("frameworks_installs") or []
        if not data.get("frameworks_enabled", True) or not installs:
            return None
        if not python or not arch:
            return None
        return cls(
            python=python,
            arch=arch,
            installs=tuple((tuple(str(p) for p in e["packages"]), str(e.get("index_url") or "")) for e in installs),
            index_url=str(data.get("frameworks_index_url") or ""),
            extra_index_urls=tuple(data.get("frameworks_extra_index_urls") or ()),
            find_links=tuple(data.get("frameworks_find_links") or ()),
            trusted_hosts=tuple(data.get("frameworks_trusted_hosts") or ()),
            no_index=bool(data.get("frameworks_no_index")),
            locked=tuple(
                (str(e.get("index_url") or ""), tuple(str(r) for r in e["requirements"]))
                for e in data.get("frameworks_locked") or []
            ),
            netrc=netrc,
        )

    def target_args(self) -> list[str]:
        """pip's options for the hosts' interpreter and platform (besides ``--python-version``)."""
        abi = f"cp{self.python.replace('.', '')}"
        return ["--implementation=cp", f"--abi={abi}", *(f"--platform={p}" for p in wheel_platforms(self.arch))]

    def source_args(self, index_url: str) -> list[str]:
        """pip's options for where one install entry's packages come from, as the role passes them."""
        index = index_url or self.index_url
        index_args = [f"--index-url={index}"] if index and not self.no_index else []
        return index_args + pip_sources(
            self.extra_index_urls, self.find_links, self.trusted_hosts, no_index=self.no_index
        )

    def locked_source_args(self, index_url: str) -> list[str]:
        """Where one index's share of the closure comes from: that index alone (or the find-links
        without an index), as the frameworks role's locked install says."""
        if self.no_index or not index_url:
            source = ["--no-index", *(f"--find-links={u}" for u in self.find_links)]
        else:
            source = [f"--index-url={index_url}"]
        return source + [f"--trusted-host={h}" for h in self.trusted_hosts]

    def download_commands(self, python_exe: str, dest: Path, requirements: Path | None = None) -> list[list[str]]:
        """One ``pip download`` per role install entry, with the options the role would pass; with
        a locked closure, one per index of exactly the hashed files (the requirement files pip
        needs for hashes are written to ``requirements``, by default beside ``dest``)."""
        common = ["--only-binary=:all:", f"--python-version={self.python}", *self.target_args()]
        if self.locked:
            folder = requirements or dest.parent / f".{self.key}-requirements"
            folder.mkdir(parents=True, exist_ok=True)
            cmds = []
            for n, (index_url, lines) in enumerate(self.locked):
                req = folder / f"locked-{n}.txt"
                req.write_text("".join(f"{line}\n" for line in lines))
                pip = [python_exe, "-m", "pip", *_ISOLATED, "download", "--disable-pip-version-check", "--quiet"]
                pip.append(f"--dest={dest}")
                source = self.locked_source_args(index_url)
                cmds.append([*pip, *common, "--require-hashes", "--no-deps", *source, "-r", str(req)])
            return cmds
        out = []
        for packages, index_url in self.installs:
            out.append(
                [
                    python_exe,
                    "-m",
                    "pip",
                    *_ISOLATED,
                    "download",
                    "--disable-pip-version-check",
                    "--quiet",
                    f"--dest={dest}",
                    *common,
                    *self.source_args(index_url),
                    *packages,
                ]
            )
        return out


class WheelServer:
    """The wheelhouse over HTTP on 127.0.0.1 (read-only files, a directory listing for pip)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server: ThreadingHTTPServer | None = None
        self.served = 0
        self._lock = threading.Lock()

    def start(self) -> int:
        outer = self

        from http.server import (  # noqa: PLC0415 (only the wheel server needs it: `plan` loads this module too)
            SimpleHTTPRequestHandler,
            ThreadingHTTPServer,
        )

        class Handler(SimpleHTTPRequestHandler):
            def send_head(self) -> Any:
                # The wheelhouse and nothing else: the base class already drops `..` from the
                # path, but it follows symlinks, so a link in the wheelhouse could serve any file
                # the controller's user can read. Whatever resolves outside the folder, or is not a
                # plain file or folder (a FIFO would hang this thread), is not found.
                if not outer.serves(self.translate_path(self.path)):
                    self.send_error(HTTPStatus.NOT_FOUND, "File not found")
                    return None
                return super().send_head()

            def copyfile(self, source: SupportsRead[AnyStr], outputfile: SupportsWrite[AnyStr]) -> None:
                # send_head opened the file itself (open(path, "rb")): a real file, which tells
                # how far it was read
                file = cast("BinaryIO", source)
                before = file.tell()
                super().copyfile(source, outputfile)
                with outer._lock:
                    outer.served += file.tell() - before

            def log_message(self, format: str, *args: object) -> None:
                return  # the run's report says what was served; no per-request noise on stderr

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(self.directory)))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="provision-wheels", daemon=True).start()
        return int(self.server.server_address[1])

    def serves(self, local: str) -> bool:
        """Whether ``local`` (a request's path on disk) is a file or folder inside the wheelhouse."""
        root = os.path.realpath(self.directory)
        real = os.path.realpath(local)
        inside = real == root or real.startswith(root + os.sep)
        return inside and (os.path.isfile(real) or os.path.isdir(real))

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextlib.contextmanager
def netrc_env(netrc: str) -> Iterator[dict[str, str] | None]:
    """The environment of the controller's ``pip download``: NETRC names a 0600 file with the
    indexes' logins for as long as the downloads run (None: no logins, this process's environment)."""
    if not netrc:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="provision-netrc-") as folder:  # 0700
        path = Path(folder) / "netrc"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(netrc)
        yield {**os.environ, "NETRC": str(path)}


def fetch_closure(ws: WheelSet, python_exe: str, dest: Path, requirements: Path) -> str | None:
    """Put the wheels of ``ws`` into ``dest`` with the controller's pip, by the lock's hashes where
    ``ws`` has a locked closure (``pip download --require-hashes --no-deps``: pip refuses a file
    whose sha256 is not the lock's); None when every download worked, else why not (one line).
    The one piece of code for "the closure's files by hash": the fleet cache's wheelhouse and
    ``provision bundle`` both fill from it."""
    with netrc_env(ws.netrc) as env:
        for cmd in ws.download_commands(python_exe, dest, requirements):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False, env=env)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return " ".join(str(exc).split())[:200]
            if r.returncode != 0:
                return last_error(r.stderr)
    return None


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip download failed"])[-1][:200]
