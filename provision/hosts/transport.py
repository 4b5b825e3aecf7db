"""How the drivers reach a host: the local machine (subprocess) or SSH (paramiko).

Everything that runs a command on a host or copies a file to it goes through :class:`Transport`,
so probe, verify and status work the same against the local machine and a fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    """What a command left behind: exit status and its decoded output."""

    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class Transport(Protocol):
    """A connection to one host. Implementations: local (subprocess) and SSH (paramiko)."""

    @property
    def name(self) -> str:
        """The host's label as the user named it (inventory name, HOST argument, 'localhost')."""
        ...

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = 60.0,
        sudo: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run a command (a shell string, or an argv that is quoted for the remote shell)."""
        ...

    def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        """Copy a local file to ``remote`` on the host."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy ``remote`` from the host to a local file."""
        ...

    def close(self) -> None: ...
