"""`up --rolling hooks`: take each batch's hosts out of the scheduler's hands around its apply.

provision owns "what is installed and proof it works"; the scheduler owns "when and where" (Slurm,
Kubernetes, anything with a drain). So provision never decides that a node is free: before a
batch it asks the scheduler to drain the batch's hosts (the user's ``--drain-cmd``), waits until
each runs nothing (``--wait-idle-cmd``, polled until ``--drain-timeout``: running work finishes,
nothing is cancelled), applies and verifies, and hands back (``--resume-cmd``) only the hosts that
passed. A host that failed stays drained, its reason rewritten to say why; the run stops there
(``--serial``'s rule), so hosts of later batches are never drained.

The reasons start with :data:`UPGRADE_PREFIX`, which provision-health's Slurm mode never resumes
(provision/remote/health/slurm.py resumes only its own ``provision-health:`` drains).

The commands are templates of the user's, run on the controller by ``/bin/sh -c`` with each
``{host}`` and ``{reason}`` replaced by the shell-quoted value (the inventory name; the reason):
``kubectl cordon {host}``, ``scontrol update nodename={host} state=drain reason={reason}``.

``--rolling slurm`` is the same loop with built-in templates over ``scontrol`` (:func:`slurm_hooks`).
"""

from __future__ import annotations

import math
import shlex
import string
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from provision.errors import BadInput

UPGRADE_PREFIX = "provision-upgrade:"
PLACEHOLDERS = ("host", "reason")
# how often --wait-idle-cmd is asked again; a scheduler answers in well under a second
POLL_S = 2.0
# one hook command may take this long (a drain that itself waits, kubectl drain, is the user's to bound)
COMMAND_TIMEOUT_S = 300.0


class HookFailed(Exception):
    """A hook command failed or timed out; the message names the host, the command and its output."""


@dataclass(frozen=True)
class Hooks:
    """The three commands of the generic rolling form and the wait's bound (seconds)."""

    drain: str
    resume: str
    wait_idle: str
    drain_timeout_s: float
    poll_s: float = POLL_S
    # run once before any host is touched: a client that is not there is bad input, not a failed drain
    preflight: str | None = None
    # a command prefix each rendered command is passed to as one shell-quoted argument (--slurm-via)
    via: str | None = None

    def command(self, template: str, host: str, reason: str = "") -> str:
        """The shell command for one host (through ``via`` when given)."""
        return self.wrap(render(template, host, reason))

    def wrap(self, command: str) -> str:
        return f"{self.via} {shlex.quote(command)}" if self.via else command

    @classmethod
    def build(
        cls, *, drain: str | None, resume: str | None, wait_idle: str | None, drain_timeout_s: float | None
    ) -> Hooks:
        """The hooks from the command line; bad input (exit 2) before any host is touched."""
        given = {"--drain-cmd": drain, "--resume-cmd": resume, "--wait-idle-cmd": wait_idle}
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise BadInput(
                f"--rolling hooks needs {', '.join(missing)}",
                "give each as a shell command with {host} (and {reason} for --drain-cmd)",
            )
        for name, value in given.items():
            check_template(name, value or "")
        return cls(drain or "", resume or "", wait_idle or "", check_timeout(drain_timeout_s))


def check_timeout(drain_timeout_s: float | None) -> float:
    """--drain-timeout: required (jobs may run for days: how long to wait is the user's call, never
    a default of ours), a number of seconds above 0."""
    if drain_timeout_s is None:
        raise BadInput(
            "--rolling needs --drain-timeout",
            "give the seconds to wait for a host's running jobs to finish (e.g. --drain-timeout 3600)",
        )
    if not math.isfinite(drain_timeout_s) or drain_timeout_s <= 0:  # nan would never time out
        raise BadInput(f"--drain-timeout {drain_timeout_s:g} is not a wait", "give a number of seconds above 0")
    return drain_timeout_s


# --rolling slurm: the three hooks over scontrol(1), with the node named as in the inventory (a
# Slurm NodeName that differs is not supported yet: docs/how-to/rolling-upgrade.md).
#   drain: `scontrol update nodename=H state=drain reason=R` (scontrol(1), "update" NodeName
#     specification: State=DRAIN with Reason; Slurm's doc/man/man1/scontrol.1);
#   wait: the node runs nothing once `scontrol show node H` says State=IDLE (base state) without
#     the COMPLETING flag: a drained node that still runs a job is ALLOCATED+DRAIN or MIXED+DRAIN,
#     one whose jobs are ending has +COMPLETING (the "State=%s" field is
#     node_state_string_complete(): base state, then "+FLAG"s; Slurm 22.05
#     src/api/node_info.c and src/common/slurm_protocol_defs.c). `-o` prints one line per node.
#   resume: `scontrol update nodename=H state=resume` (clears DRAIN and the reason; scontrol(1)).
# Not `scontrol reboot ASAP nextstate=RESUME`: scontrol(1) says a node rebooted so "will resume as
# normal and the node's reason and DRAIN state will be cleared" once its slurmd registers, i.e. back
# in service before provision verified it, against "resume only on pass"; and the reboot would come
# when the node is idle, before the apply that needs it. The apply's own reboot (the role's) happens
# while the node stays drained, and only `state=resume` after a pass hands it back.
SLURM_DRAIN = "scontrol update nodename={host} state=drain reason={reason}"
SLURM_RESUME = "scontrol update nodename={host} state=resume"
SLURM_WAIT_IDLE = (
    "scontrol -o show node {host} | grep -Eo '(^| )State=[^ ]+' | grep -v COMPLETING | grep -Eq 'State=IDLE([+]|$)'"
)


def slurm_hooks(via: str | None, drain_timeout_s: float | None) -> Hooks:
    """``--rolling slurm``: the hooks over ``scontrol``, run on the controller, or through ``via``
    (``--slurm-via 'ssh login1'``) where the controller has no Slurm client: then each whole command
    is passed to ``via`` as ONE shell-quoted argument, because ssh joins its arguments with spaces
    into the one string the remote shell parses (OpenSSH ssh.c: "A command has been specified.
    Store it into the buffer.", each argv joined by " "), so a reason with spaces or ``->`` would
    otherwise be split, or taken for a redirection, there."""
    if via is not None and not via.strip():
        raise BadInput(
            "--slurm-via is empty", "give the command that reaches a Slurm client, e.g. --slurm-via 'ssh login1'"
        )
    return Hooks(
        drain=SLURM_DRAIN,
        resume=SLURM_RESUME,
        wait_idle=SLURM_WAIT_IDLE,
        drain_timeout_s=check_timeout(drain_timeout_s),
        preflight="scontrol version",  # scontrol(1): "version" displays the version of scontrol being executed
        via=via,
    )


def check_template(name: str, template: str) -> None:
    """A hook must name ``{host}`` and nothing but :data:`PLACEHOLDERS` (a typo such as ``{hostname}``
    would run the same command for every host)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        fix = "write {host} and {reason}; a literal brace as {{ or }}"
        raise BadInput(f"{name} {template!r}: {exc}", fix) from None
    unknown = sorted({f for f in fields if f not in PLACEHOLDERS})
    if unknown:
        raise BadInput(
            f"{name} {template!r} names {', '.join('{' + f + '}' for f in unknown)}",
            "only {host} and {reason} are filled in; write a literal brace as {{ or }}",
        )
    if "host" not in fields:
        raise BadInput(f"{name} {template!r} does not name {{host}}", "put {host} where the host's name goes")


def render(template: str, host: str, reason: str = "") -> str:
    """The command for one host: each placeholder replaced by its shell-quoted value."""
    return template.format(host=shlex.quote(host), reason=shlex.quote(reason))


def upgrade_reason(old: str | None, new: str) -> str:
    """The drain reason while a host is upgraded: ``provision-upgrade: <old lock> -> <new lock>``."""
    return f"{UPGRADE_PREFIX} {old or 'none'} -> {new}"


def failed_reason(detail: str) -> str:
    """The reason a host that did not pass is left drained with."""
    return f"{UPGRADE_PREFIX} verify failed: {detail}"[:250]  # Slurm shows a reason of any length; keep a line


Run = Callable[[str], "subprocess.CompletedProcess[str]"]


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"no answer within {COMMAND_TIMEOUT_S:g} s")


def _said(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return f": {text[-1]}" if text else ""


@dataclass
class Rolling:
    """Runs the hooks (the side effects at the edge; ``run`` and ``sleep`` are the OS's by default)."""

    hooks: Hooks
    run: Run = _shell
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def _do(self, what: str, command: str) -> None:
        done = self.run(command)
        if done.returncode != 0:
            raise HookFailed(f"{what} failed (exit {done.returncode}){_said(done)}: {command}")

    def preflight(self) -> None:
        """Run the hooks' preflight command (``scontrol version``) once: bad input (exit 2) when it
        fails, before any host is drained or changed."""
        if self.hooks.preflight is None:
            return
        command = self.hooks.wrap(self.hooks.preflight)
        done = self.run(command)
        if done.returncode != 0:
            raise BadInput(
                f"`{command}` does not run here (exit {done.returncode}{_said(done)})",
                "install Slurm's client (scontrol) on this machine, or give --slurm-via 'ssh HOST' to run it there",
            )

    def drain(self, host: str, reason: str) -> None:
        self._do(f"{host}: drain", self.hooks.command(self.hooks.drain, host, reason))

    def resume(self, host: str) -> None:
        self._do(f"{host}: resume", self.hooks.command(self.hooks.resume, host))

    def wait_idle(self, host: str) -> float:
        """Ask until the host runs nothing (exit 0); the seconds it took. Past --drain-timeout:
        :class:`HookFailed` (the host's jobs are left running: nothing is cancelled)."""
        command = self.hooks.command(self.hooks.wait_idle, host)
        started = self.clock()
        while True:
            done = self.run(command)
            if done.returncode == 0:
                return self.clock() - started
            if self.clock() - started + self.hooks.poll_s > self.hooks.drain_timeout_s:
                raise HookFailed(
                    f"{host}: still busy after --drain-timeout {self.hooks.drain_timeout_s:g} s{_said(done)}: {command}"
                )
            self.sleep(self.hooks.poll_s)
