"""Slurm's ``HealthCheckProgram`` mode of provision-health (``--slurm``): drain, update, resume.

Slurm runs the program as root on each compute node every ``HealthCheckInterval`` seconds and
kills it after 60 s; "any action to be taken must be explicitly performed by the program (e.g.
execute ``scontrol update NodeName=foo State=drain Reason=...``)" (slurm.conf(5),
HealthCheckProgram: https://slurm.schedmd.com/slurm.conf.html#OPT_HealthCheckProgram). So this
module turns the check's verdict into at most one ``scontrol update``:

- unhealthy: drain with ``provision-health: <the problems>``, or rewrite the reason when it is
  already ours and the problems changed; a node drained by anyone else keeps their reason;
- healthy: resume ONLY a node drained with a reason that starts ``provision-health:`` (an admin's
  ``maintenance``, a rolling upgrade's ``provision-upgrade:`` are never undone);
- cannot tell: nothing changes.

Every scontrol call has a timeout (:data:`TIMEOUT`), so a hung slurmctld never holds slurmd's
health check. The node's state is read from ``scontrol show node NAME`` text (a format every Slurm
release prints; ``--json`` is left alone as its schema moves between releases). Standard library
only, Python 3.8+, like the rest of the program.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass

PREFIX = "provision-health:"
TIMEOUT = 10.0  # seconds per scontrol call: three calls stay well inside slurmd's 60 s kill
# scontrol prints a drain reason as "Reason=<text> [<user>@<time>]" on a line of its own.
_REASON_STAMP = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")


class SlurmError(Exception):
    """scontrol failed or the node is unknown: one line, the node left as it was."""


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # e.g. IDLE+DRAIN
    reason: str  # without scontrol's "[user@time]" stamp; "" when none

    @property
    def drained(self) -> bool:
        # DRAIN is a flag on the base state (IDLE+DRAIN, MIXED+DRAIN, DOWN+DRAIN): slurm.conf(5)
        # and scontrol(1) print it joined with "+".
        return "DRAIN" in self.state.upper().split("+")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(PREFIX)


def parse_node(text: str) -> dict[str, str]:
    """``scontrol show node NAME`` -> its fields. ``Reason=`` runs to the end of its line (it may
    hold spaces and '='); every other line is space-separated ``Key=Value`` pairs."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Reason="):
            fields["Reason"] = _REASON_STAMP.sub("", stripped[len("Reason=") :])
            continue
        for token in stripped.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
    return fields


def node_name(explicit: str | None = None, env: dict[str, str] | None = None) -> str:
    """The Slurm node this runs on: ``--slurm-node``, else SLURMD_NODENAME where slurmd sets it
    (slurmd's run_script_health_check sets it to the node's name: src/slurmd/slurmd/slurmd.c in
    SchedMD/slurm, tag slurm-22-05-8-1 and master alike; slurm.conf(5) does not say so), else the
    short host name (Slurm's default NodeName is the short name, slurm.conf(5) NodeName)."""
    if explicit:
        return explicit
    env = dict(os.environ) if env is None else env
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    return socket.gethostname().split(".")[0]


def _scontrol(scontrol: str, args: list[str], timeout: float) -> str:
    try:
        done = subprocess.run([scontrol, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{scontrol} not found (install slurm-client, or pass --scontrol)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"scontrol {args[0]} took over {timeout:g} s (is slurmctld up?)") from None
    except OSError as exc:  # not executable, a folder: one line, never a traceback in slurmd's log
        raise SlurmError(f"cannot run {scontrol}: {exc.strerror}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmError(f"scontrol {' '.join(args[:2])} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def read_node(name: str, scontrol: str = "scontrol", timeout: float = TIMEOUT) -> Node:
    fields = parse_node(_scontrol(scontrol, ["show", "node", name], timeout))
    if fields.get("NodeName") != name:
        raise SlurmError(f"scontrol show node {name}: no such node (pass --slurm-node NAME)")
    return Node(name, fields.get("State", ""), fields.get("Reason", ""))


def reason_for(problems: list[str]) -> str:
    # The reason is one scontrol argument; ';' separates problems as in the program's line.
    return f"{PREFIX} {'; '.join(problems)}"


def decide(node: Node, code: int, problems: list[str]) -> list[str] | None:
    """The ``scontrol update`` arguments that bring ``node`` in line with the verdict, or None."""
    if code == 1:
        reason = reason_for(problems)
        if node.drained and (not node.ours or node.reason == reason):
            return None  # someone else's drain stays theirs; ours is already right
        return ["update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}"]
    if code == 0 and node.drained and node.ours:
        return ["update", f"NodeName={node.name}", "State=RESUME"]
    return None  # cannot tell: change nothing


def reconcile(code: int, problems: list[str], name: str, scontrol: str = "scontrol", timeout: float = TIMEOUT) -> str:
    """Read the node, act, and say what was done (one phrase for the program's line)."""
    node = read_node(name, scontrol, timeout)
    args = decide(node, code, problems)
    if args is None:
        if node.drained and not node.ours:
            return f"slurm: {name} drained by another ({node.reason or 'no reason'}), left as is"
        return f"slurm: {name} unchanged"
    _scontrol(scontrol, args, timeout)
    done = "resumed" if args[2] == "State=RESUME" else "drain reason updated" if node.drained else "drained"
    return f"slurm: {name} {done}"
