"""`provision up` on the SSH test hosts with the CPU torch stack: ratios measured in one run.

    python benchmarks/bench_up.py [--hosts N]   (root; TESTHOSTS_* env picks the host set's names)

Measures, on N fresh hosts (Debian 12 containers, python3-venv from apt through the test proxy,
`torch==2.13.0+cpu` from the local wheelhouse):

- converged rerun / first run, with the fast path (verify only) and without it (`--force`);
- up on N hosts / up on 1 host: the same work (the venv and torch, apt already done) on one host
  and then on all N;
- the rendered ansible.cfg against Ansible's defaults (forks 5, no pipelining, fact gathering
  every play): `ansible-playbook site.yml` on the N converged hosts, over the test bridge and
  again with ``--rtt-ms`` of round trip (default 50 ms, SSH through ``delay_pipe.py``: this
  sandbox has no netem);
- the controller's peak memory (the RSS of `provision up` and every process under it, sampled
  every 0.2 s) during the first run.

Prints a Markdown table (docs/contributing/benchmarks.md keeps the numbers).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hosts import harness


def tree_rss(pid: int) -> int:
    """Bytes of resident memory of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def timed_up(cwd: Path, args: list[str]) -> tuple[float, int, int]:
    """Seconds, exit status and peak tree RSS of one `provision up`."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "provision", "up", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss(proc.pid))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    stop.set()
    sampler.join()
    return time.perf_counter() - start, rc, peak


def with_latency(inventory: Path, one_way_ms: float) -> str:
    """A copy of the run's inventory whose SSH goes through delay_pipe.py; returns its file name."""
    import yaml

    pipe = Path(__file__).resolve().parent / "delay_pipe.py"
    doc = yaml.safe_load(inventory.read_text())
    for group in doc["all"]["children"].values():
        for host_vars in (group.get("hosts") or {}).values():
            extra = f"-o ProxyCommand='{sys.executable} {pipe} {one_way_ms:g} %h %p'"
            host_vars["ansible_ssh_common_args"] = f"{host_vars.get('ansible_ssh_common_args', '')} {extra}".strip()
    out = inventory.with_name("inventory-rtt.yml")
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out.name


def ssh_all(hostset: harness.HostSet, hosts: list[harness.TestHost], command: str) -> None:
    from tests.integration import roles_harness as rh

    for h in hosts:
        rh.ssh(hostset, h, command)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=int(os.environ.get("PROVISION_TESTHOSTS", "4")))
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/bench-up"))
    parser.add_argument("--rtt-ms", type=float, default=50.0, help="round trip of the emulated network")
    ns = parser.parse_args()
    wheelhouse = harness.fill_wheelhouse()
    work = ns.work
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    with harness.bench_running(ns.hosts, "/var/tmp/provision-bench", "bh", "10.200.20", ro_binds=[wheelhouse]) as hs:
        config = work / "provision.yaml"
        config.write_text(
            "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
            f"install: {{pip: {{find_links: ['{wheelhouse}']}}, apt: {{proxy: '{hs.proxy}'}}}}\n"
            "verify: {allow_cpu: true}\n"
        )
        base = [
            "-i",
            str(hs.inventory),
            "-F",
            str(hs.ssh_config),
            "-c",
            str(config),
            "--set",
            "frameworks_no_index=true",
            "--yes",
            "--json",
        ]
        first, rc1, peak = timed_up(work, base)
        fast, rc2, _ = timed_up(work, base)
        forced, rc3, _ = timed_up(work, [*base, "--force"])

        # Ansible's defaults against the rendered ansible.cfg, same run dir, same converged hosts
        runs = sorted((work / ".provision" / "runs").iterdir())
        ansible_dir = runs[-1] / "ansible"
        rendered_cfg = (ansible_dir / "ansible.cfg").read_text()
        roles = next(line for line in rendered_cfg.splitlines() if line.startswith("roles_path"))
        plain = work / "defaults.cfg"
        plain.write_text(f"[defaults]\n{roles}\nhost_key_checking = True\n")
        bin_dir = Path(sys.executable).parent

        def playbook(cfg: Path, inventory: str = "inventory.yml", **extra_env: str) -> float:
            env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "PATH": f"{bin_dir}:{os.environ['PATH']}", **extra_env}
            start = time.perf_counter()
            # -i on the command line: a relative `inventory =` is read from the config file's folder
            done = subprocess.run(
                [str(bin_dir / "ansible-playbook"), "-i", inventory, "site.yml"],
                cwd=ansible_dir,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            assert all(f"{h.name} " in done.stdout for h in hs.hosts), done.stdout[-2000:]  # every host played
            return time.perf_counter() - start

        playbook(ansible_dir / "ansible.cfg")  # warm both the same way (fact cache, host keys)
        with_defaults = playbook(plain)
        with_rendered = playbook(ansible_dir / "ansible.cfg")

        # the same comparison over a network with ns.rtt_ms of round trip (SSH through delay_pipe.py;
        # fresh SSH masters in their own control path dir, warmed once)
        slow_inventory = with_latency(ansible_dir / "inventory.yml", ns.rtt_ms / 2)
        slow_env = {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp-rtt")}
        playbook(ansible_dir / "ansible.cfg", slow_inventory, **slow_env)
        slow_defaults = playbook(plain, slow_inventory, **slow_env)
        slow_rendered = playbook(ansible_dir / "ansible.cfg", slow_inventory, **slow_env)

        # the same work on 1 host and on N: wipe the venv, up; apt's packages stay
        ssh_all(hs, hs.hosts, "rm -rf /opt/provision")
        one, rc4, _ = timed_up(work, [*base, "--limit", hs.hosts[0].name])
        ssh_all(hs, hs.hosts[:1], "rm -rf /opt/provision")
        many, rc5, many_peak = timed_up(work, base)

    n = ns.hosts
    print(f"exit statuses: {rc1} {rc2} {rc3} {rc4} {rc5}")
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| first run, {n} hosts | {first:.1f} s | |")
    print(f"| converged rerun (fast path) / first run | {fast / first:.2f} ({fast:.1f} s) | <= 0.2 |")
    print(f"| converged rerun with --force / first run | {forced / first:.2f} ({forced:.1f} s) | <= 0.5 |")
    print(f"| up on {n} hosts / up on 1 host (venv + torch) | {many / one:.2f} ({many:.1f} s / {one:.1f} s) | <= 2.5 |")
    print(
        f"| ansible-playbook, Ansible defaults / rendered ansible.cfg ({n} converged hosts) | "
        f"{with_defaults / with_rendered:.2f}x ({with_defaults:.1f} s / {with_rendered:.1f} s) | >= 1.5x |"
    )
    print(
        f"| ansible-playbook, Ansible defaults / rendered ansible.cfg ({n} converged hosts, {ns.rtt_ms:g} ms RTT) | "
        f"{slow_defaults / slow_rendered:.2f}x ({slow_defaults:.1f} s / {slow_rendered:.1f} s) | >= 1.5x |"
    )
    print(f"| controller peak memory, first run on {n} hosts | {max(peak, many_peak) / 2**30:.2f} GiB | <= 1.5 GiB |")


if __name__ == "__main__":
    main()
