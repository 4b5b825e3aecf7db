"""The Slurm files provision generates for a host (pure: facts and paths in, text out).

provision writes its own files and prints the ``slurm.conf`` lines a user adds; it never edits
the user's ``slurm.conf`` (docs/how-to/slurm.md). Each format is Slurm's, cited beside it:

- ``gres.conf``: one ``NodeName= Name=gpu Type= File=`` line per GPU model of the host
  (gres.conf(5): https://slurm.schedmd.com/gres.conf.html, the same keys in 22.05's man page);
- ``helpers.conf``: the ``provision_verified`` node feature for the node_features/helpers plugin,
  one ``Feature=`` per line as 22.05 reads it (helpers.conf(5):
  https://slurm.schedmd.com/helpers.conf.html);
- the two small programs those name: Slurm's ``HealthCheckProgram`` takes a path and no
  arguments (slurm.conf(5) HealthCheckProgram), so a wrapper runs ``provision-health --slurm``
  with the installed spec; the feature's helper prints the feature and exits 0 only when the host
  is healthy (which includes "the last verify passed").
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from provision.model.facts import ProbedGpu

FEATURE = "provision_verified"


@dataclass(frozen=True)
class HealthPaths:
    """Where the health program lives on the host (the folder holding ``health/``), its spec and
    the Python that runs it; the generated programs only name them."""

    program_dir: str
    spec: str
    python: str = "/usr/bin/python3"


def gres_type(model: str | None) -> str | None:
    """A GRES Type from the probed model (``H100-SXM`` -> ``h100_sxm``): lower case, letters,
    digits and ``_`` only, so it is also a plain ``--gres=gpu:h100_sxm:1`` word."""
    if not model:
        return None
    return re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_") or None


def _files(first: int, count: int) -> str:
    # gres.conf(5) File= takes a host list style range: /dev/nvidia[0-3].
    return f"/dev/nvidia{first}" if count == 1 else f"/dev/nvidia[{first}-{first + count - 1}]"


def gres_conf(node: str, gpus: Sequence[ProbedGpu]) -> str:
    """gres.conf lines for ``node``'s GPUs, in the probe's order (the PCI bus order, which is the
    order the driver numbers /dev/nvidiaN in; confidence: medium, read from no NVIDIA page here).
    A run of GPUs of one model is one line; a host without GPUs gets no line."""
    lines: list[str] = []
    start = 0
    while start < len(gpus):
        end = start
        while end < len(gpus) and gpus[end].model == gpus[start].model:
            end += 1
        kind = gres_type(gpus[start].model)
        typed = f" Type={kind}" if kind else ""
        lines.append(f"NodeName={node} Name=gpu{typed} File={_files(start, end - start)}")
        start = end
    return "".join(f"{line}\n" for line in lines)


def gres_count(gpus: Sequence[ProbedGpu]) -> str | None:
    """The node's ``Gres=`` value for its slurm.conf NodeName line (``gpu:h100_sxm:8``)."""
    counts: dict[str | None, int] = {}
    for g in gpus:
        counts[gres_type(g.model)] = counts.get(gres_type(g.model), 0) + 1
    parts = [f"gpu:{kind}:{n}" if kind else f"gpu:{n}" for kind, n in counts.items()]
    return ",".join(parts) or None


def _program(paths: HealthPaths, *args: str) -> str:
    argv = [paths.python, "-m", "health", "--spec", paths.spec, *args]
    return f"cd {shlex.quote(paths.program_dir)} && exec {' '.join(shlex.quote(a) for a in argv)}"


def health_check_program(paths: HealthPaths) -> str:
    """The HealthCheckProgram: provision-health in Slurm mode (drains, updates, resumes its own)."""
    header = "# Written by provision: Slurm's HealthCheckProgram (docs/how-to/slurm.md)."
    return f"#!/bin/sh\n{header}\n{_program(paths, '--slurm')}\n"


def feature_helper(paths: HealthPaths) -> str:
    """The helpers plugin's program for :data:`FEATURE`: prints it and exits 0 only when healthy.

    The plugin needs both: it runs the helper with no arguments, takes nothing from a helper that
    exits non-zero, and of a zero exit's output takes each line that names one of its features
    (_feature_get_state and _foreach_filter_modes in
    src/plugins/node_features/helpers/node_features_helpers.c, SchedMD/slurm tag
    slurm-22-05-8-1; the same test in master)."""
    check = _program(paths).replace("exec ", "", 1)
    return (
        "#!/bin/sh\n# Written by provision: the provision_verified node feature (docs/how-to/slurm.md).\n"
        f"if ({check}) >/dev/null 2>&1; then echo {FEATURE}; exit 0; fi\nexit 1\n"
    )


def helpers_conf(helper: str) -> str:
    """helpers.conf: one ``Feature=`` per line (22.05 takes no list)."""
    return f"Feature={FEATURE} Helper={helper}\n"


def slurm_conf_lines(program: str, interval_s: int, nodes: Mapping[str, Sequence[ProbedGpu]]) -> list[str]:
    """The lines the user adds to slurm.conf (printed and documented, never written by provision)."""
    lines = [
        f"HealthCheckProgram={program}",
        f"HealthCheckInterval={interval_s}",
        "HealthCheckNodeState=ANY",
        "NodeFeaturesPlugins=node_features/helpers",
    ]
    if any(nodes.values()):
        lines.append("GresTypes=gpu")
    for node, gpus in nodes.items():  # the GPUs go on the node's own NodeName line
        gres = gres_count(gpus)
        if gres:
            lines.append(f"# on NodeName={node}'s line: Gres={gres}")
    return lines
