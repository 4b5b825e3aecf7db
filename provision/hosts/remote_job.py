"""One remote job: files copied to a private folder on a host, a command run there with a
timeout, its JSON document read back, the folder removed.

``provision verify`` (the smoke job, :mod:`provision.remote.smoke`) and ``provision tune`` (the
tuning job, :mod:`provision.remote.tune_job`) run their jobs this way over any
:class:`~provision.hosts.transport.Transport`. The folder comes from ``mktemp -d``: a fresh name
and mode 0700, so no other user of the host can read the job's files or swap them for their own
before the job runs. Removing it never hides the job's own outcome.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from provision.errors import OperationFailed
from provision.hosts.transport import CommandResult, Transport

# What a job's folder holds, by path inside it: a local file to copy there, or bytes to write.
Content = Path | bytes


class RemoteJob:
    """A job's folder on one host, made by :meth:`open` (or ``with``) and removed by :meth:`close`."""

    def __init__(self, transport: Transport, files: Mapping[str, Content], *, prefix: str) -> None:
        self.transport = transport
        self.workdir = ""
        self._files = dict(files)
        self._prefix = prefix  # the folder is /tmp/PREFIX.XXXXXX

    def __enter__(self) -> RemoteJob:
        self.open()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def open(self) -> str:
        """Make the folder and copy the files into it; return the folder."""
        made = self.transport.run(f"mktemp -d /tmp/{self._prefix}.XXXXXX", timeout=30)
        if not made.ok or not made.stdout.strip():
            raise OperationFailed(
                f"cannot make a work folder on {self.transport.name}: {made.stderr.strip()[:200]}",
                "check that /tmp is writable there",
            )
        self.workdir = made.stdout.strip()
        try:
            folders = sorted({str(Path(name).parent) for name in self._files} - {"."})
            if folders:
                self.transport.run(["mkdir", "-p", *(self.path(f) for f in folders)], timeout=30)
            for name, content in self._files.items():
                self._put(name, content)
        except BaseException:
            self.close()  # a half-copied job is not left behind
            raise
        return self.workdir

    def path(self, name: str) -> str:
        """Where ``name`` (a path inside the folder) is on the host."""
        return f"{self.workdir}/{name}"

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``argv`` on the host with ``env`` set for it; CommandTimeout past ``timeout``."""
        command = shlex.join(argv)
        assigned = " ".join(f"{key}={shlex.quote(value)}" for key, value in (env or {}).items())
        return self.transport.run(f"{assigned} {command}" if assigned else command, timeout=timeout)

    def document(self, name: str) -> Any:
        """The JSON document the job wrote to ``name``: None when there is no such file,
        ValueError when it is not JSON (an empty file included)."""
        shown = self.transport.run(["cat", self.path(name)], timeout=60)
        if not shown.ok:
            return None
        return json.loads(shown.stdout)

    def close(self) -> None:
        """Remove the folder (once); a failure to remove it is not the job's failure."""
        if not self.workdir:
            return
        workdir, self.workdir = self.workdir, ""
        with contextlib.suppress(Exception):
            self.transport.run(["rm", "-rf", workdir], timeout=60)

    def _put(self, name: str, content: Content) -> None:
        if isinstance(content, Path):
            self.transport.put(content, self.path(name))
            return
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(content)
        try:
            self.transport.put(Path(f.name), self.path(name))
        finally:
            Path(f.name).unlink()


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """The last line of a job's stdout that is a JSON object (its progress lines come before it)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None
