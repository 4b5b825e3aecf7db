"""Installing the lock's wheel closure on a host: uv against pip, alternated in one run.

    python benchmarks/bench_install.py [--runs N]   (root; TESTHOSTS_* env picks the host set's names)

On one SSH test host (a Debian 12 container, the wheelhouse bind-mounted read-only), the CPU
torch closure (`torch==2.13.0+cpu` and its dependencies, resolved by provision's closure code
from the wheelhouse as `plan` does) is installed into a fresh venv, N times with each installer,
pip and uv alternating. Timed on the host (not the SSH round trip): exactly the command the
frameworks role runs for the closure,

    pip: <venv>/bin/pip install --require-hashes --no-deps -r FILE --no-index --find-links=WH
    uv:  uv pip install --require-hashes --no-deps -r FILE --python <venv>/bin/python --no-index --find-links=WH

Before each run (not timed) the venv is made anew and pip's and uv's caches are emptied, as on a
fresh host. The test hosts' pip does not byte-compile (harness PIP_CONF_NO_COMPILE) and uv does
not by default, so neither compiles. uv is the knowledge's release (os.yaml), installed from the
wheelhouse as python_env installs it.

Prints a Markdown table (docs/contributing/benchmarks.md keeps the numbers).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provision.ansible.role_vars import locked_installs
from provision.fleet.closure import lock_closures
from provision.matrix import load
from provision.model.settings import InstallSettings, PipSettings
from provision.stack.lock import LockGroup
from tests.hosts import harness
from tests.integration import roles_harness as rh

VENV = "/var/tmp/bench-install/venv"
REQS = "/var/tmp/bench-install/locked.txt"
UV = "/var/tmp/bench-install/uv"


def closure_file(wheelhouse: Path, host: harness.TestHost) -> tuple[str, int]:
    """The closure's hashed requirement file, as the frameworks role writes it, and its length."""
    group = rh.lock_group("cpu", [host.name], os="debian-12", frameworks=[f"{harness.TORCH_CPU}+cpu"])
    install = InstallSettings(pip=PipSettings(find_links=(str(wheelhouse),)))
    locked = LockGroup.from_json(group)
    with tempfile.TemporaryDirectory() as cache:
        [locked] = lock_closures([locked], install, {"frameworks_no_index": True}, cache=Path(cache))
    [entry] = locked_installs(locked.python_packages)
    return "".join(f"{line}\n" for line in entry["requirements"]), len(entry["requirements"])


def timed(hs: harness.HostSet, host: harness.TestHost, command: str) -> float:
    """Seconds ``command`` took on the host, after a fresh venv and empty caches."""
    prepare = f"rm -rf {VENV} /root/.cache/pip /root/.cache/uv && python3 -m venv {VENV}"
    rh.ssh(hs, host, prepare)
    out = rh.ssh(hs, host, f"s=$(date +%s.%N); {command} >/dev/null 2>&1 || exit 1; e=$(date +%s.%N); echo $s $e")
    start, end = (float(x) for x in out.split())
    return end - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    ns = parser.parse_args()
    sp = load().t.standalone_python
    if sp is None:
        raise SystemExit("the knowledge has no standalone_python entry (os.yaml)")
    wheelhouse = harness.fill_wheelhouse()
    source = f"--no-index --find-links={shlex.quote(str(wheelhouse))}"
    commands = {
        "pip": f"PIP_DISABLE_PIP_VERSION_CHECK=1 {VENV}/bin/pip install --require-hashes --no-deps -r {REQS} {source}",
        "uv": f"UV_NO_CONFIG=1 {UV}/bin/uv pip install --require-hashes --no-deps -r {REQS} "
        f"--python {VENV}/bin/python {source}",
    }
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {"pip": [], "uv": []}
    with harness.bench_running(1, "/var/tmp/provision-bench-install", "bi", "10.200.50", ro_binds=[wheelhouse]) as hs:
        host = hs.hosts[0]
        text, count = closure_file(wheelhouse, host)
        rh.ssh(hs, host, f"mkdir -p {Path(REQS).parent} && printf %s {shlex.quote(text)} > {REQS}")
        # the venv module, from apt through the test proxy, as python_env installs it (not timed)
        rh.ssh(hs, host, "apt-get update -q >/dev/null && apt-get install -y -q python3-venv >/dev/null")
        # uv as python_env installs it: its own venv, pip from the configured sources, by its pinned sha256
        pinned = f"uv=={sp.uv}" + "".join(f" --hash=sha256:{h}" for h in sp.uv_wheels["x86_64"].values())
        rh.ssh(
            hs,
            host,
            f"python3 -m venv {UV} && printf '%s\\n' {shlex.quote(pinned)} > {UV}/provision-uv.txt && "
            f"{UV}/bin/pip install -q --require-hashes --no-deps {source} -r {UV}/provision-uv.txt",
        )
        for _ in range(ns.runs):
            for name in ("pip", "uv"):  # alternated, so drift in the machine's load hits both
                times[name].append(timed(hs, host, commands[name]))
    load_after = os.getloadavg()

    pip, uv = statistics.median(times["pip"]), statistics.median(times["uv"])
    print(
        f"{time.strftime('%Y-%m-%d')}, {count} wheels, {ns.runs} runs each, load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after, {os.cpu_count()} CPUs"
    )
    print("| installer | runs (s) | median | uv / pip | target |")
    print("|---|---|---|---|---|")
    print(f"| pip | {' '.join(f'{t:.1f}' for t in times['pip'])} | {pip:.1f} s | | |")
    print(f"| uv {sp.uv} | {' '.join(f'{t:.1f}' for t in times['uv'])} | {uv:.1f} s | **{uv / pip:.2f}** | <= 0.5 |")


if __name__ == "__main__":
    main()
