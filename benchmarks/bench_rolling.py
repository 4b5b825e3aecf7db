"""The time the `up --rolling slurm` loop adds to a batch beyond its apply and verify (target:
under 5 s per batch): one drain, the wait's polls until the node is idle, one resume, through
provision's own Rolling with the built-in scontrol hooks (provision/fleet/rolling.py), on a node
that runs nothing (a job's own run time is the user's, not the loop's).

Two ways to run it:

    .venv/bin/python benchmarks/bench_rolling.py [--runs 10]
        a stand-in ``scontrol`` on PATH (a shell script answering as Slurm 22.05 prints
        ``show node``): the loop's own cost on this machine (processes, pipes, quoting), no Slurm.
    .venv/bin/python benchmarks/bench_rolling.py --via 'ssh -F CFG CONTROLLER' --node NODE
        the real scontrol against a live cluster (the SSH test hosts' Slurm cluster of
        tests/integration/test_slurm.py; that test prints the same figures from inside its run).

The wait polls every POLL_S seconds: after a node's last job ends, the loop notices it up to
POLL_S later; the table adds that worst case to the per-batch figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from provision.fleet.rolling import POLL_S, Rolling, slurm_hooks, upgrade_reason  # noqa: E402

TARGET_S = 5.0
STAND_IN = """#!/bin/sh
case "$*" in
  version) echo "slurm 22.05.8";;
  "-o show node "*) echo "NodeName=$4 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 Reason=x";;
esac
"""


def cycle(rolling: Rolling, node: str) -> tuple[float, float, float]:
    """One batch's round trips: drain, wait (the node is idle: one poll), resume; seconds each."""
    t0 = time.perf_counter()
    rolling.drain(node, upgrade_reason("bench-old", "bench-new"))
    t1 = time.perf_counter()
    rolling.wait_idle(node)
    t2 = time.perf_counter()
    rolling.resume(node)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def measure(via: str | None, node: str, runs: int) -> list[tuple[float, float, float]]:
    rolling = Rolling(slurm_hooks(via, 60.0))
    rolling.preflight()
    return [cycle(rolling, node) for _ in range(runs)]


def table(rows: list[tuple[float, float, float]], where: str) -> str:
    drain, wait, resume = (statistics.median(col) for col in zip(*rows, strict=True))
    total = drain + wait + resume
    worst = total + POLL_S
    verdict = "pass" if worst < TARGET_S else "FAIL"
    return "\n".join(
        [
            f"{where}, {len(rows)} runs, medians:",
            "",
            "| drain | wait (idle: 1 poll) | resume | per batch | + poll interval (worst case) | target |",
            "|---|---|---|---|---|---|",
            f"| {drain:.3f} s | {wait:.3f} s | {resume:.3f} s | {total:.3f} s | {worst:.2f} s |"
            f" < {TARGET_S:g} s: {verdict} |",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--via", help="the --slurm-via command that reaches a real scontrol")
    ap.add_argument("--node", default="node-1", help="the Slurm node to drain and resume (with --via)")
    a = ap.parse_args()
    if a.via:
        rows = measure(a.via, a.node, a.runs)
        print(table(rows, f"real scontrol through `{a.via}`, node {a.node}"))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "scontrol")
        script.write_text(STAND_IN)
        script.chmod(0o755)
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ['PATH']}"
        rows = measure(None, a.node, a.runs)
    print(table(rows, "stand-in scontrol on this machine (the loop's own cost)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
