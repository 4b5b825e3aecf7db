"""The local machine as a :class:`~provision.hosts.transport.Transport`: commands through subprocess
(a new session each, so a timeout stops the whole pipeline), files by copying.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from provision.hosts.transport import (
    DEFAULT_COMMAND_TIMEOUT,
    CommandResult,
    CommandTimeout,
    Spawned,
    shell_text,
    sudo_stdin,
    sudo_wrap,
)


class LocalTransport:
    """The machine provision runs on, through subprocess."""

    def __init__(
        self, name: str = "localhost", env: Mapping[str, str] | None = None, sudo_password: str | None = None
    ) -> None:
        self._name = name
        self._env = dict(env) if env is not None else None
        self._sudo_password = sudo_password

    @property
    def name(self) -> str:
        return self._name

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        sudo: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        text = shell_text(command)
        if sudo and os.geteuid() != 0:
            text = sudo_wrap(text, self._sudo_password)
            stdin = sudo_stdin(self._sudo_password, stdin)
        # A new session, so that a timeout stops the whole pipeline, not only the shell.
        proc = subprocess.Popen(
            ["/bin/sh", "-c", text],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(
                f"command timed out after {timeout:g}s on {self._name}",
                "raise the timeout or check what the command waits for",
            ) from None
        return CommandResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    def spawn(self, command: str | Sequence[str], *, sudo: bool = False, stdin: bytes | None = None) -> Spawned:
        """Start a command that keeps running; see :class:`Spawned`."""
        text = shell_text(command)
        if sudo and os.geteuid() != 0:
            text = sudo_wrap(text, self._sudo_password)
            stdin = sudo_stdin(self._sudo_password, stdin)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", f"exec 2>&1; {text}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._env,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        pin, pout = proc.stdin, proc.stdout

        def write(data: bytes) -> None:
            pin.write(data)
            pin.flush()

        def close() -> None:
            with contextlib.suppress(OSError):
                pin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            pout.close()

        spawned = Spawned(
            self._name,
            pout,
            read=lambda: os.read(pout.fileno(), 1 << 16),
            write=write,
            running=lambda: proc.poll() is None,
            close=close,
        )
        if stdin:
            spawned.write(stdin)
        return spawned

    def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        shutil.copyfile(local, remote)
        os.chmod(remote, mode)

    def get(self, remote: str, local: Path) -> None:
        shutil.copyfile(remote, local)

    def close(self) -> None:
        pass
