"""Error types and exit codes: the one place that maps a failure to what the user sees.

Every failure the user can cause or meet is a :class:`ProvisionError` with a stable ``code``
(used in ``--json`` output), a one-line ``message`` (what is wrong), a ``hint`` (how to fix it)
and the process exit code documented in docs/explanation/design.md. Anything else escaping a command is a bug
and is reported as ``internal`` (exit 1) with the traceback behind ``--debug``.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable, Iterator
from enum import IntEnum
from types import FrameType
from typing import Any, ClassVar

# The login part of any URL in a text: ``scheme://user:token@`` up to the last ``@`` before the
# host's end (a password may hold a raw ``@``: urllib.parse.urlsplit also splits at the last one).
_URL_LOGIN = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]*(?:@[^/?#\s@]*)*@")
REDACTED = "***"


def redact(text: str) -> str:
    """``text`` with the login of every URL in it replaced by ``***`` (``https://***@host/...``):
    the one redaction of what reaches a person or a log (errors, notes, reports). The credential
    itself travels only in the run dir's secrets.yml (provision.ansible.settings)."""
    return _URL_LOGIN.sub(rf"\g<scheme>{REDACTED}@", text)


class ExitCode(IntEnum):
    """Process exit codes (docs/explanation/design.md, "CLI contract"); what each means: :data:`EXIT_MEANINGS`."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNSATISFIABLE = 3
    # 128 + the signal's number, the shell's convention for a command a signal ended
    # (https://www.gnu.org/software/bash/manual/html_node/Exit-Status.html)
    HANGUP = 129
    INTERRUPTED = 130
    TERMINATED = 143


# What each exit code means, as the reference page (docs/reference/exit-codes.md) prints it.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success: every host passed, the plan was written, the command did what was asked",
    ExitCode.FAILED: "an operation failed: a host failed, verification failed, a host was unreachable",
    ExitCode.BAD_INPUT: "bad input: usage, config, inventory, unknown names, malformed specifiers; nothing was changed",
    ExitCode.UNSATISFIABLE: "unsatisfiable: no compatible set of versions exists for the request",
    ExitCode.HANGUP: "interrupted by SIGHUP (the terminal closed); the run stopped as on Ctrl-C",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
    ExitCode.TERMINATED: "interrupted by SIGTERM (kill, systemd, a cancelled CI job); the run stopped as on Ctrl-C",
}


class ProvisionError(Exception):
    """Base of every error the CLI reports as one line ``error: <what> (<how to fix>)``."""

    code: ClassVar[str] = "failed"
    exit_code: ClassVar[ExitCode] = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        suggestions: list[Any] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        # every error reaches a person or a log (stderr, --json, a report's note): never a URL's login
        message, hint = redact(message), redact(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.suggestions: list[Any] = list(suggestions or [])
        # Extra keys merged into the JSON error object (e.g. "conflicts" for unsatisfiable).
        self.details: dict[str, Any] = dict(details or {})

    def reason(self) -> str:
        """What went wrong and how to fix it, on one line (a report's note about one host)."""
        text = " ".join(self.message.split())
        if self.hint:
            text += f" ({' '.join(self.hint.split())})"
        return text

    def status(self) -> int:
        """The process's exit status for this error."""
        return int(self.exit_code)

    def one_line(self) -> str:
        """The stderr line: never more than one line, whatever the message holds."""
        return f"error: {self.reason()}"

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "suggestions": self.suggestions,
        }
        error.update(self.details)
        return {"ok": False, "error": error}


class BadInput(ProvisionError):
    """The user gave something we cannot use; nothing was changed anywhere."""

    code = "bad_input"
    exit_code = ExitCode.BAD_INPUT


class LockMismatch(BadInput):
    """A probed host is not the host its lock group was planned for (OS, arch, GPU): `up --from-lock`
    and `up --bundle` refuse it before any change."""


class Unsatisfiable(ProvisionError):
    """No set of versions satisfies every rule; ``conflicts`` names the failing rules."""

    code = "unsatisfiable"
    exit_code = ExitCode.UNSATISFIABLE

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        conflicts: list[str] | None = None,
        suggestions: list[Any] | None = None,
    ) -> None:
        super().__init__(message, hint, suggestions=suggestions)
        self.conflicts = list(conflicts or [])
        self.details["conflicts"] = self.conflicts


class OperationFailed(ProvisionError):
    """Something was attempted and did not work (a host, a check, a cloud call)."""

    code = "failed"
    exit_code = ExitCode.FAILED


class Unreachable(OperationFailed):
    """A host could not be reached or refused us (host key, auth, network)."""

    code = "unreachable"


class Interrupted(ProvisionError):
    """The run was interrupted (Ctrl-C, SIGTERM, SIGHUP); running the same command again continues it."""

    code = "interrupted"
    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, hint: str = "", *, signum: int | None = None) -> None:
        super().__init__(message, hint)
        self.signum = signum  # the signal that ended the run (None: Ctrl-C, or no signal)

    def status(self) -> int:
        return 128 + self.signum if self.signum else int(self.exit_code)

    @classmethod
    def after(cls, exc: BaseException, message: str, hint: str) -> Interrupted:
        """The error for ``exc`` (a KeyboardInterrupt, the :class:`SignalInterrupt` of a signal, or
        click's Abort, which click raises from either)."""
        seen: BaseException | None = exc
        while seen is not None and not isinstance(seen, SignalInterrupt):
            seen = seen.__cause__ or seen.__context__
        return cls(message, hint, signum=seen.signum if seen is not None else None)


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP (or SIGINT, where the apply handles it) as a KeyboardInterrupt: the code
    that cleans up after Ctrl-C runs for it too, and the exit status names the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# What a terminal closing (SIGHUP), `kill`, systemd or a cancelled CI job (SIGTERM) send: both end
# a run the way Ctrl-C does, through its cleanup (a launch's instances removed, Ansible stopped,
# the host locks released, the report written), instead of killing the process in the middle.
END_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# The signals the running block is ending for; the apply's cancel flag adds the ones it takes
# (signal_taken), so one that comes during the cleanup after them is only said, too.
_FIRED: list[int] = []


def signal_taken(signum: int) -> None:
    """A handler other than :func:`signals_as_interrupt`'s took ``signum`` and is stopping the run."""
    _FIRED.append(signum)


@contextlib.contextmanager
def signals_as_interrupt(
    say: Callable[[str], None],
    *,
    cleanup: str = "the run is stopped and its host locks released",
    again: str = "stopping the run",
) -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`SignalInterrupt` (once) while the block runs.

    The first one starts the same cleanup as Ctrl-C; the ones after it are said and ignored, so a
    second SIGTERM (systemd and CI runners repeat theirs) cannot cut the cleanup short. The
    previous handlers are back once the block ends. ``cleanup`` and ``again`` say what happens.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    fired = _FIRED
    fired.clear()

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if fired:
            say(f"{name} again: still {again}; wait for it to finish")
            return
        fired.append(signum)
        say(f"{name}: stopping; {cleanup} as on Ctrl-C")
        raise SignalInterrupt(signum)

    previous = {s: signal.signal(s, handler) for s in END_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
