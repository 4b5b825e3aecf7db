"""Benchmark `provision plan` of 1, 100 and 1,000 described hosts: time and peak memory (issue 26).

Run: ``.venv/bin/python benchmarks/bench_plan.py [--runs 5] [--sizes 1,100,1000]``. Each size is an
INI inventory of N hosts planned with ``provision plan -i INVENTORY --assume FACTS --json``: every
inventory host is described by the same assumed facts and none is contacted, so the run measures
planning itself (inventory, resolve, lock, the Ansible run dir), not SSH. Each run is a fresh
process in a fresh folder. Prints a Markdown table (the one in docs/contributing/benchmarks.md)
and writes benchmarks/results/bench_plan.json.

Per size: wall time and CPU time (user + sys of the child), best and median of the runs, and the
child's peak resident memory (``ru_maxrss`` of the one child, read with ``os.wait4`` so earlier
children do not mask it). CPU time is the steadier figure on a shared machine: it does not count
waiting for the neighbours. Targets: 1,000 hosts within 5x the time of one, peak memory within 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSUME = "os=ubuntu-22.04,gpu=H100-SXM:8"
TIME_TARGET = 5.0  # 1,000 hosts / 1 host
MEMORY_TARGET = 1.5


def write_inventory(folder: Path, hosts: int) -> Path:
    """An INI inventory of ``hosts`` hosts with addresses from 10.0.0.0/16 (never contacted)."""
    lines = ["[gpus]"]
    lines += [f"gpu{i:04d} ansible_host=10.0.{i // 256}.{i % 256}" for i in range(hosts)]
    path = folder / "hosts.ini"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_once(hosts: int, home: Path) -> dict[str, float]:
    """One fresh ``provision plan`` process: wall s, CPU s, peak RSS MiB."""
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        folder = Path(tmp)
        inventory = write_inventory(folder, hosts)
        cmd = [sys.executable, "-m", "provision", "plan", "-i", str(inventory), "--assume", ASSUME, "--json"]
        cmd += ["--out", str(folder / "run"), "--lock", str(folder / "provision.lock")]
        # one HOME for the whole benchmark: no user config of this machine, and the parsed-knowledge
        # cache the warm-up fills is there for every measured run, as for an installed package
        env = {**os.environ, "HOME": str(home)}
        env.pop("XDG_CACHE_HOME", None)
        with (folder / "out.json").open("wb") as out, (folder / "err.txt").open("wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=out, stderr=err)
            # wait4 gives this child's own rusage: RUSAGE_CHILDREN's ru_maxrss is the maximum over
            # every child so far, so a small size measured after a large one would show its peak
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # reaped above: keep Popen from waiting again
        if code != 0:
            tail = (folder / "err.txt").read_text(errors="replace")[-2000:]
            raise SystemExit(f"provision plan of {hosts} hosts exited {code}:\n{tail}")
        planned = len(json.loads((folder / "out.json").read_text())["hosts"])
        if planned != hosts:
            raise SystemExit(f"provision plan planned {planned} hosts, not {hosts}")
        # ru_maxrss is in KiB on Linux
        return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024}


def measure(sizes: list[int], runs: int) -> dict[int, dict[str, float]]:
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-plan-home-") as home:
        run_once(1, Path(home))  # warm-up: byte-compiled modules and the parsed-knowledge cache
        for n in sizes:
            results[n] = summary([run_once(n, Path(home)) for _ in range(runs)])
    return results


def summary(samples: list[dict[str, float]]) -> dict[str, float]:
    """Best and median times of the runs, and the highest peak memory."""
    walls = [s["wall_s"] for s in samples]
    cpus = [s["cpu_s"] for s in samples]
    return {
        "wall_best_s": min(walls),
        "wall_median_s": statistics.median(walls),
        "cpu_best_s": min(cpus),
        "cpu_median_s": statistics.median(cpus),
        "peak_mib": max(s["peak_mib"] for s in samples),
    }


def table(results: dict[int, dict[str, float]]) -> str:
    first = results[min(results)]
    rows = [
        "| hosts | wall best (s) | wall median (s) | CPU best (s) | CPU median (s) | peak memory (MiB) "
        "| CPU median / 1 host | peak memory / 1 host |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, r in results.items():
        rows.append(
            f"| {n:,} | {r['wall_best_s']:.2f} | {r['wall_median_s']:.2f} | {r['cpu_best_s']:.2f} "
            f"| {r['cpu_median_s']:.2f} | {r['peak_mib']:.0f} | {r['cpu_median_s'] / first['cpu_median_s']:.2f} "
            f"| {r['peak_mib'] / first['peak_mib']:.2f} |"
        )
    return "\n".join(rows)


def verdict(results: dict[int, dict[str, float]]) -> list[str]:
    small, large = min(results), max(results)
    a, b = results[small], results[large]
    lines = []
    for what, ratio, target in (
        ("wall median", b["wall_median_s"] / a["wall_median_s"], TIME_TARGET),
        ("CPU median", b["cpu_median_s"] / a["cpu_median_s"], TIME_TARGET),
        ("peak memory", b["peak_mib"] / a["peak_mib"], MEMORY_TARGET),
    ):
        met = "met" if ratio <= target else "MISSED"
        lines.append(f"{what}, {large:,} hosts / {small:,}: {ratio:.2f}x (target <= {target}x: {met})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per size (best and median are shown)")
    ap.add_argument("--sizes", default="1,100,1000", help="host counts, comma-separated")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    load_before = os.getloadavg()
    results = measure(sizes, args.runs)
    load_after = os.getloadavg()
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {args.runs} runs per size")
    print(f"load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}\n")
    print(table(results))
    print()
    lines = verdict(results)
    print("\n".join(lines))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_plan.json").write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "runs": args.runs,
                "load_before": load_before,
                "load_after": load_after,
                "results": {str(n): r for n, r in results.items()},
                "verdict": lines,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
