"""The transport contract: how a driver runs a command on a host or copies a file to it.

Everything that runs a command on a host or copies a file to it goes through :class:`Transport`,
so probe, verify and status work the same against the local machine and a fleet. This module
owns the contract (:class:`Transport`, :class:`CommandResult`, :class:`CommandTimeout`), the
sudo wrapping both implementations share, and :class:`Spawned` (a long-lived command). The
implementations are :mod:`provision.hosts.local` (subprocess) and :mod:`provision.hosts.ssh`
(paramiko), whose :func:`~provision.hosts.ssh.connect` opens the right one for a target.

paramiko is imported inside the functions that use it: ``provision resolve`` and ``--help`` import
this module's types without paying for it.
"""

from __future__ import annotations

import contextlib
import selectors
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from provision.errors import OperationFailed

if TYPE_CHECKING:
    pass


DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_COMMAND_TIMEOUT = 60.0


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


def paramiko_errors() -> type[Exception]:
    import paramiko  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)

    return paramiko.SSHException


class CommandTimeout(OperationFailed):
    """A command ran past its timeout and was stopped."""

    code = "timeout"


def shell_text(command: str | Sequence[str]) -> str:
    """The shell text of a command: a string as it is, an argv quoted for the remote shell."""
    return command if isinstance(command, str) else shlex.join(command)


def sudo_wrap(command: str, password: str | None) -> str:
    """``command`` run as root through sudo (both transports wrap a non-root login's command so)."""
    # -n: never prompt (a prompt would hang until the timeout); -S with a password reads it
    # from stdin, so it never appears on a command line, in `ps` or in a log. -p '' keeps the
    # prompt text out of stderr.
    flags = "-S -p ''" if password is not None else "-n"
    return f"sudo {flags} -- sh -c {shlex.quote(command)}"


def sudo_stdin(password: str | None, stdin: bytes | None) -> bytes | None:
    """The stdin for :func:`sudo_wrap`'s command: the password's line first, when there is one."""
    if password is None:
        return stdin
    return password.encode() + b"\n" + (stdin or b"")


class Spawned:
    """A long-lived command on a host (see ``spawn``): lines from its stdout (its stderr, sudo's
    included, is merged in, so a failure to start reads as a line), bytes to its stdin.

    Closing it closes the command's stdin and the channel: the command reads end of file, which
    is also what it reads when the controller dies (the kernel closes the pipe or the TCP
    connection of a killed process).
    """

    def __init__(self, host: str, fileno: Any, *, read: Any, write: Any, running: Any, close: Any) -> None:
        self.host = host
        self._read, self._write, self._running, self._close = read, write, running, close
        self._buf = bytearray()
        self._waiter = selectors.DefaultSelector()  # poll/epoll: no FD_SETSIZE limit (see SSHTransport._run)
        self._waiter.register(fileno, selectors.EVENT_READ)

    def readline(self, timeout: float) -> str:
        """The next line of its stdout (without the newline); '' when it ended without one."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommandTimeout(
                    f"no answer from {self.host} after {timeout:g}s", "check the host and what the command waits for"
                )
            if not self._waiter.select(min(left, 0.5)):
                continue
            chunk = self._read()
            if not chunk:
                break
            self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line.decode(errors="replace")

    def write(self, data: bytes) -> bool:
        """Send to its stdin; False when it or the connection is gone."""
        try:
            self._write(data)
        except (OSError, EOFError, ValueError, paramiko_errors()):
            return False
        return True

    def running(self) -> bool:
        return bool(self._running())

    def close(self) -> None:
        self._waiter.close()
        with contextlib.suppress(Exception):
            self._close()
