"""The smoke job's DDP check under load: the whole CPU job with two gloo ranks, RUNS times, PARALLEL
at a time (target: every run passes; a spurious FAIL verdict is a defect of the product).

Each run is the standalone job as a host runs it (``python provision/remote/smoke/job.py --allow-cpu
--cpu-ranks 2``), so each is three processes (the job and its two spawned ranks); three runs at once
on a 2-core machine is the load under which gloo's teardown aborted a rank with SIGABRT
("terminate called without an active exception") and the verdict came out FAIL. A run that does
not pass is listed with its exit status, its verdict, the DDP error and the last lines of its log.
Prints a Markdown table; writes benchmarks/results/ddp.json.

    .venv/bin/python benchmarks/bench_ddp.py [--runs 30] [--parallel 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "provision" / "remote" / "smoke" / "job.py"


def one_run(index: int, where: str) -> dict[str, Any]:
    cwd = os.path.join(where, f"run{index}")  # a core file lands in the cwd of the process that dumps it
    os.makedirs(cwd, exist_ok=True)
    out = os.path.join(cwd, "report.json")
    command = [sys.executable, str(JOB), "--allow-cpu", "--cpu-ranks", "2", "--json-out", out]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)
    seconds = time.perf_counter() - started
    report: dict[str, Any] = {}
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    ddp = report.get("distributed") or {}
    passed = proc.returncode == 0 and report.get("verdict") == "pass" and ddp.get("error") is None
    row = {
        "run": index,
        "passed": passed,
        "returncode": proc.returncode,
        "verdict": report.get("verdict"),
        "ddp_error": ddp.get("error"),
        "failed_checks": [c["name"] for c in report.get("checks", []) if not c["ok"]],
        "seconds": round(seconds, 2),
        "log_tail": [] if passed else proc.stderr.splitlines()[-8:],
    }
    # one line per finished run, so a run cut short by a deadline still says what it saw
    print(f"run {index}: {'pass' if passed else 'FAIL'} ({row['seconds']} s)", file=sys.stderr, flush=True)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--parallel", type=int, default=3)
    p.add_argument(
        "--keep",
        metavar="DIR",
        help="run in DIR and keep the reports there (and core files, under `ulimit -c unlimited`)",
    )
    args = p.parse_args()
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.parallel) as pool:
        where = args.keep or scratch
        os.makedirs(where, exist_ok=True)
        runs = list(pool.map(lambda i: one_run(i, where), range(args.runs)))
    wall = time.perf_counter() - started
    passed = sum(r["passed"] for r in runs)
    seconds = sorted(r["seconds"] for r in runs)
    print(
        f"CPU: {os.cpu_count()} cores, {args.runs} runs, {args.parallel} at a time, "
        f"load {load_before:.1f} before / {os.getloadavg()[0]:.1f} after, {wall:.0f} s in all\n"
    )
    print("| runs | passed | failed | median s per run | max s |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {args.runs} | {passed} | {args.runs - passed} | {seconds[len(seconds) // 2]} | {seconds[-1]} |")
    for r in runs:
        if not r["passed"]:
            print(
                f"\nrun {r['run']}: exit {r['returncode']}, verdict {r['verdict']}, "
                f"failed {r['failed_checks']}, ddp error {r['ddp_error']!r}"
            )
            for line in r["log_tail"]:
                print(f"    {line}")
    outcome = "met" if passed == args.runs else "MISSED"
    print(f"\ntarget: every run passes: {outcome}")
    results = REPO / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "ddp.json").write_text(
        json.dumps({"runs": args.runs, "parallel": args.parallel, "passed": passed, "detail": runs}, indent=2)
    )
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
