"""Error types and exit codes: the one place that maps a failure to what the user sees.

Every failure the user can cause or meet is a :class:`ProvisionError` with a stable ``code``
(used in ``--json`` output), a one-line ``message`` (what is wrong), a ``hint`` (how to fix it)
and the process exit code documented in docs/explanation/design.md. Anything else escaping a command is a bug
and is reported as ``internal`` (exit 1) with the traceback behind ``--debug``.
"""

from __future__ import annotations

import re
from enum import IntEnum
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
    INTERRUPTED = 130


# What each exit code means, as the reference page (docs/reference/exit-codes.md) prints it.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success: every host passed, the plan was written, the command did what was asked",
    ExitCode.FAILED: "an operation failed: a host failed, verification failed, a host was unreachable",
    ExitCode.BAD_INPUT: "bad input: usage, config, inventory, unknown names, malformed specifiers; nothing was changed",
    ExitCode.UNSATISFIABLE: "unsatisfiable: no compatible set of versions exists for the request",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
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
    """The run was interrupted (Ctrl-C); running the same command again continues it."""

    code = "interrupted"
    exit_code = ExitCode.INTERRUPTED
