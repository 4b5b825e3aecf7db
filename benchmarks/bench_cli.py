"""Cold start of the CLI's light paths against a bare interpreter start (best of N, ratios).

`provision --help` and `--version` load only click and the command registry (subcommands are
imported when they run), so their cost over `python -c pass` stays small as commands are added.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 15


def best_of(argv: list[str]) -> tuple[float, float]:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    base_best, base_median = best_of([sys.executable, "-c", "pass"])
    print("| command | best (s) | median (s) | best / `python -c pass` |")
    print("|---|---|---|---|")
    print(f"| `python -c pass` | {base_best:.3f} | {base_median:.3f} | 1.0 |")
    for args in (["--version"], ["--help"]):
        best, median = best_of([sys.executable, "-m", "provision", *args])
        print(f"| `provision {' '.join(args)}` | {best:.3f} | {median:.3f} | {best / base_best:.1f} |")


if __name__ == "__main__":
    main()
