"""Benchmark `provision resolve`: cold process time and resolving the whole GPU x OS grid.

Run: ``.venv/bin/python benchmarks/bench_resolve.py [--runs 15]``. Prints a Markdown table
(the one in docs/sections/resolve.md) and writes benchmarks/results/bench_resolve.json.
Times are medians; the cold process is compared with ``python -c pass`` on the same machine,
so the ratio travels between machines better than the seconds do.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_process(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, capture_output=True, cwd=ROOT)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def grid() -> dict[str, float]:
    """Every known GPU x every OS, newest torch, in one process (knowledge loaded once)."""
    t0 = time.perf_counter()
    from provision.errors import Unsatisfiable
    from provision.matrix import load
    from provision.resolve import HostSpec, StackRequest, resolve

    k = load()
    t_load = time.perf_counter() - t0
    request = StackRequest.build()
    ok = unsat = 0
    per: list[float] = []
    t1 = time.perf_counter()
    for gpu in k.gpus:
        for osr in k.os_releases:
            s = time.perf_counter()
            try:
                resolve(request, HostSpec.describe(gpu=gpu.name, os=osr.id))
                ok += 1
            except Unsatisfiable:
                unsat += 1
            per.append(time.perf_counter() - s)
    total = time.perf_counter() - t1
    return {
        "import_and_load_s": t_load,
        "resolves": ok + unsat,
        "ok": ok,
        "unsatisfiable": unsat,
        "total_s": total,
        "median_ms": statistics.median(per) * 1000,
        "max_ms": max(per) * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    py = sys.executable
    base = time_process([py, "-c", "pass"], args.runs)
    cold = time_process(
        [py, "-m", "provision", "resolve", "--json", "--gpu", "H100-SXM", "--gpu-count", "8"], args.runs
    )
    unsat = time_process(
        [py, "-m", "provision", "resolve", "--json", "--gpu", "K80", "--driver", "580"], args.runs
    )
    g = grid()
    result = {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "python_c_pass_s": base,
        "resolve_cold_s": cold,
        "resolve_cold_ratio": cold / base,
        "resolve_unsat_cold_s": unsat,
        "resolve_unsat_cold_ratio": unsat / base,
        "grid": g,
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_resolve.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| measurement | value | ratio |\n|---|---|---|")
    print(f"| `python -c pass` (median of {args.runs}) | {base * 1000:.0f} ms | 1.0 |")
    print(f"| cold `provision resolve --json` (H100-SXM x 8) | {cold * 1000:.0f} ms | {cold / base:.1f} x |")
    print(f"| cold `provision resolve --json`, unsatisfiable (K80 + driver 580, with suggestions) "
          f"| {unsat * 1000:.0f} ms | {unsat / base:.1f} x |")  # fmt: skip
    print(f"| import + load knowledge, in process | {g['import_and_load_s'] * 1000:.0f} ms | |")
    print(
        f"| {g['resolves']} resolves (every GPU x OS, newest torch: {g['ok']} ok, {g['unsatisfiable']} "
        f"unsatisfiable) | {g['total_s'] * 1000:.0f} ms total, median {g['median_ms']:.2f} ms, "
        f"max {g['max_ms']:.1f} ms | |"
    )


if __name__ == "__main__":
    main()
