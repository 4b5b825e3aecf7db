"""Benchmark `provision resolve`: cold process time and resolving the whole GPU x OS grid.

Run: ``.venv/bin/python benchmarks/bench_resolve.py [--runs 15]``. Prints a Markdown table
(the one in docs/contributing/benchmarks.md) and writes benchmarks/results/bench_resolve.json.
Times are medians; the cold process (byte-compiled, as ``pip install`` leaves a package, and with
the parsed data cached as after the first start) is compared with ``python -c pass`` on the same machine,
so the ratio travels between machines better than the seconds do. CPU time (user + sys of the
child) is the headline because it does not count waiting for other processes on a busy box.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_process(cmd: list[str], runs: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds user+sys) of running ``cmd`` to completion.

    CPU time is what the process itself costs; it stays meaningful on a busy shared machine,
    where wall time mostly measures the neighbours.
    """
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, capture_output=True, cwd=ROOT, env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(walls), statistics.median(cpus)


def grid(frameworks: tuple[str, ...] = ()) -> dict[str, float]:
    """Every known GPU x every OS in one process (knowledge loaded once)."""
    t0 = time.perf_counter()
    from provision.errors import Unsatisfiable
    from provision.matrix import load
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    k = load()
    t_load = time.perf_counter() - t0
    request = StackRequest.build(frameworks=frameworks)
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


# The slowest requests the property tests (tests/unit/stack/test_resolve_properties.py) drew: two
# frameworks and a system CUDA toolkit that no set passes with, so the request's own resolve and
# each of its suggestions' relaxed tries meet every torch x jax release pair.
HARDEST = (
    ({"frameworks": ["torch", "jax"], "cuda_toolkit": "12.2"}, {"gpu": "T4G", "os": "rhel-10", "gpu_count": 2}),
    (
        {"frameworks": ["torch", "jax"], "cuda_toolkit": "13.0", "cudnn": "9.10.2.21"},
        {"gpu": "RTX-3070", "os": "ubuntu-20.04", "gpu_count": 2},
    ),
)


def hardest() -> list[float]:
    """Seconds for each of :data:`HARDEST` in one process (unsatisfiable, with suggestions)."""
    from provision.errors import Unsatisfiable
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    out = []
    for req, host in HARDEST:
        t0 = time.perf_counter()
        with contextlib.suppress(Unsatisfiable):
            resolve(StackRequest.build(**req), HostSpec.describe(**host))
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    py = sys.executable
    # As installed: pip byte-compiles a package's modules, so a start reads bytecode. A checkout run
    # with PYTHONDONTWRITEBYTECODE (as on this machine) compiles every module of its own on every
    # start instead: measured too, in its own row (the project's __pycache__ folders are removed
    # for it, and written back for the others; the venv's packages keep theirs).
    scratch = Path(tempfile.mkdtemp(prefix="bench-resolve-"))
    installed = {**os.environ, "XDG_CACHE_HOME": str(scratch / "cache")}
    installed.pop("PYTHONDONTWRITEBYTECODE", None)
    source = {**installed, "PYTHONDONTWRITEBYTECODE": "1"}
    # no parsed copy of the data (the first start after an install or a data change): a cache
    # folder that cannot be written
    first = {**installed, "XDG_CACHE_HOME": "/proc/provision-no-cache"}
    resolve_h100 = [py, "-m", "provision", "resolve", "--json", "--gpu", "H100-SXM", "--gpu-count", "8"]
    base = time_process([py, "-c", "pass"], args.runs, installed)
    for pycache in (ROOT / "provision").rglob("__pycache__"):
        shutil.rmtree(pycache)
    cold_source = time_process(resolve_h100, args.runs, source)
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "provision")], check=True, env=installed)
    subprocess.run(resolve_h100, check=True, capture_output=True, cwd=ROOT, env=installed)  # fills the data cache
    cold = time_process(resolve_h100, args.runs, installed)
    cold_first = time_process(resolve_h100, args.runs, first)
    unsat = time_process(
        [py, "-m", "provision", "resolve", "--json", "--gpu", "K80", "--driver", "580"], args.runs, installed
    )
    shutil.rmtree(scratch, ignore_errors=True)
    g = grid()
    pinned = grid(("torch==2.15.0",))
    hard = hardest()
    result = {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "load_average": os.getloadavg(),
        "python_c_pass": {"wall_s": base[0], "cpu_s": base[1]},
        "resolve_cold": {"wall_s": cold[0], "cpu_s": cold[1], "cpu_ratio": cold[1] / base[1]},
        "resolve_cold_from_source": {"wall_s": cold_source[0], "cpu_s": cold_source[1]},
        "resolve_cold_no_data_cache": {"wall_s": cold_first[0], "cpu_s": cold_first[1]},
        "resolve_unsat_cold": {"wall_s": unsat[0], "cpu_s": unsat[1], "cpu_ratio": unsat[1] / base[1]},
        "grid": g,
        "grid_torch_2_15_0": pinned,
        "hardest_unsat_s": hard,
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_resolve.json").write_text(json.dumps(result, indent=2) + "\n")

    def row(name: str, m: tuple[float, float]) -> str:
        return f"| {name} | {m[1] * 1000:.0f} ms | {m[0] * 1000:.0f} ms | {m[1] / base[1]:.1f} x |"

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"median of {args.runs} runs; load average {load}")
    print("| measurement | CPU time | wall time | CPU ratio |\n|---|---|---|---|")
    print(row("`python -c pass`", base))
    print(row("cold `provision resolve --json` (H100-SXM x 8)", cold))
    print(row("the same, no parsed copy of the data yet (first start after an install)", cold_first))
    print(row("the same, every module compiled from source (PYTHONDONTWRITEBYTECODE checkout)", cold_source))
    print(row("cold `provision resolve --json`, unsatisfiable (K80 + driver 580, with suggestions)", unsat))
    print(f"| import + load knowledge, in process | | {g['import_and_load_s'] * 1000:.0f} ms | |")
    print(
        f"| {g['resolves']} resolves in one process (every GPU x OS, newest torch: {g['ok']} ok, "
        f"{g['unsatisfiable']} unsatisfiable) | | {g['total_s'] * 1000:.0f} ms total, "
        f"median {g['median_ms']:.2f} ms, max {g['max_ms']:.1f} ms | |"
    )
    print(
        f"| {pinned['resolves']} resolves of `torch==2.15.0` (every GPU x OS: {pinned['ok']} ok, "
        f"{pinned['unsatisfiable']} unsatisfiable with suggestions) | | "
        f"{pinned['total_s'] * 1000:.0f} ms total, "
        f"median {pinned['median_ms']:.2f} ms, max {pinned['max_ms']:.1f} ms | |"
    )
    print(
        "| the two slowest unsatisfiable requests the property tests drew (torch + jax + a system toolkit, "
        f"with suggestions) | | {' and '.join(f'{t:.2f} s' for t in hard)} | |"
    )


if __name__ == "__main__":
    main()
