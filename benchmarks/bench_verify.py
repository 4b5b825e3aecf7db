"""Time to verdict on the CPU, against the time of `python -c "import torch"` (target: at most 4x).

Runs, alternating so that machine noise hits all alike, ``ROUNDS`` times each:
  import torch        python -c "import torch"
  job                 python provision/remote/smoke/job.py --allow-cpu (the standalone job, as a host runs it)
  provision verify    python -m provision verify --local --allow-cpu --json (copy, run, collect)
and prints a Markdown table of medians and ratios; writes benchmarks/results/verify.json.

    .venv/bin/python benchmarks/bench_verify.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 4.0


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return elapsed


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "import torch": [sys.executable, "-c", "import torch"],
            "job": [
                sys.executable,
                str(REPO / "provision" / "remote" / "smoke" / "job.py"),
                "--allow-cpu",
                "--quiet",
                "--json-out",
                os.path.join(tmp, "r.json"),
            ],
            "provision verify": [
                sys.executable,
                "-m",
                "provision",
                "verify",
                "--local",
                "--allow-cpu",
                "--json",
            ],
        }
        timed(commands["import torch"])  # warm the page cache once
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, command in commands.items():
                times[name].append(timed(command))
    base = statistics.median(times["import torch"])
    rows: list[dict[str, Any]] = []
    for name, values in times.items():
        median = statistics.median(values)
        rows.append(
            {
                "what": name,
                "median_s": round(median, 2),
                "min_s": round(min(values), 2),
                "ratio": round(median / base, 2),
            }
        )
    print(f"CPU: {os.cpu_count()} cores, {rounds} rounds, load {os.getloadavg()[0]:.1f}\n")
    print("| what | median s | min s | / import torch |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['what']} | {row['median_s']} | {row['min_s']} | {row['ratio']}x |")
    worst = max(r["ratio"] for r in rows if r["what"] != "import torch")
    outcome = "met" if worst <= TARGET_RATIO else "MISSED"
    print(f"\ntarget: time to verdict <= {TARGET_RATIO}x import torch: {outcome}")
    results = REPO / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "verify.json").write_text(json.dumps({"rounds": rounds, "rows": rows, "times": times}, indent=2))
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
