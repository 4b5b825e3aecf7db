"""The Slurm integration on a REAL Slurm cluster: Debian 12's slurmctld, slurmd, slurm-client and
munge (22.05) on the SSH test hosts, one controller and two compute nodes, shared by every test
here (one session-scoped cluster: the packages install once, in parallel on the three hosts).

``up`` does not install provision-health yet, so the cluster fixture copies the program's FILES
and a spec onto the compute nodes as ``up`` will, in folders of this test's own (never the
``/opt/provision`` the other tests' ``up`` writes). Stand-ins, named as such: the spec's venv holds
one REAL distribution (iniconfig, copied with its dist-info from this project's .venv) and expects
no driver and no GPU (the hosts have none); the containers have no /dev/kmsg, so an empty
kernel log file stands in for it; ``/dev/nvidia0``/``1`` are device nodes made for ``slurmd -G``.
"""

from __future__ import annotations

import json
import subprocess
import sysconfig
import tarfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from provision.fleet import slurm_files
from provision.model.facts import ProbedGpu
from provision.remote.health import SOURCES
from tests.hosts import harness
from tests.integration.roles_harness import ssh

pytestmark = pytest.mark.slow

INTERVAL = 5  # HealthCheckInterval, seconds: the scenario's deadlines are three of these
ROOT = "/opt/provision-slurm-test"  # this test's own folder on the hosts
PATHS = slurm_files.HealthPaths(program_dir=f"{ROOT}/lib", spec=f"{ROOT}/health.json")
PROGRAM, HELPER = f"{ROOT}/provision-health-slurm", f"{ROOT}/provision-feature-verified"
SITE = Path(sysconfig.get_paths()["purelib"])
VENV_SITE = f"{ROOT}/venv/lib/python3.11/site-packages"
MARK = "# provision-slurm-test"


@dataclass(frozen=True)
class Cluster:
    hostset: harness.HostSet
    controller: harness.TestHost
    nodes: tuple[harness.TestHost, harness.TestHost]
    dist_info: str  # iniconfig's dist-info folder name in the venv

    def on(self, host: harness.TestHost, command: str, check: bool = True) -> str:
        return ssh(self.hostset, host, command, check)

    def ctl(self, command: str) -> str:
        return self.on(self.controller, command)


def _slurm_conf(controller: harness.TestHost, nodes: tuple[harness.TestHost, ...]) -> str:
    names = ",".join(n.name for n in nodes)
    lines = [
        "ClusterName=provision",
        f"SlurmctldHost={controller.name}({controller.address})",
        "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc",  # no cgroup plugins in the containers
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "ReturnToService=2",
        "SlurmUser=slurm",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "JobAcctGatherType=jobacct_gather/none",
        # The lines docs/how-to/slurm.md tells users to add, from the generator itself.
        *slurm_files.slurm_conf_lines(PROGRAM, INTERVAL, {n.name: [] for n in nodes}),
        *(f"NodeName={n.name} NodeAddr={n.address} CPUs=1 State=UNKNOWN" for n in nodes),
        f"PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def _payload(spec: dict[str, Any]) -> bytes:
    """A tar of everything a compute node gets: the program, the spec, the venv, the two programs."""
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(path: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, BytesIO(data))

        for name, source in SOURCES.items():
            add(f"{PATHS.program_dir}/health/{name}", source.read_bytes())
        info = next(SITE.glob("iniconfig-*.dist-info"))
        for line in (info / "RECORD").read_text().splitlines():
            path = line.split(",")[0]
            if path and not path.startswith(".."):
                add(f"{VENV_SITE}/{path}", (SITE / path).read_bytes())
        add(f"{ROOT}/venv/pyvenv.cfg", b"home = /usr/bin\nversion = 3.11.2\n")
        add(PATHS.spec, json.dumps(spec).encode())
        add(PROGRAM, slurm_files.health_check_program(PATHS).encode(), 0o755)
        add(HELPER, slurm_files.feature_helper(PATHS).encode(), 0o755)
    return buf.getvalue()


def _put(hostset: harness.HostSet, host: harness.TestHost, data: bytes, command: str) -> None:
    r = subprocess.run(
        ["ssh", "-F", str(hostset.ssh_config), host.name, command], input=data, capture_output=True, timeout=300
    )
    assert r.returncode == 0, f"{host.name}: {command}: {r.stderr.decode().strip()}"


def _poll(what: str, probe: Callable[[], bool], deadline_s: float) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > deadline_s:
            raise AssertionError(f"not within {deadline_s:g} s: {what}")
        time.sleep(0.5)
    return time.monotonic() - started


@pytest.fixture(scope="session")
def slurm_cluster(testhosts: harness.HostSet) -> Iterator[Cluster]:
    controller, *nodes = testhosts.hosts[-3:]
    cluster_nodes = (nodes[0], nodes[1])
    every = [controller, *cluster_nodes]
    version = next(SITE.glob("iniconfig-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]
    spec: dict[str, Any] = {
        "schema": "provision.health/1",
        "lock_hash": "slurm-test",
        "expected": {},
        "driver": {},
        "gpus": {"count": 0},
        "venv": f"{ROOT}/venv",
        "python_packages": [{"name": "iniconfig", "version": version, "sha256": "0" * 64}],
        "verify": {"verdict": "pass", "at": "2026-12-04T10:00:00+00:00", "max_age_s": None},
    }
    conf = _slurm_conf(controller, cluster_nodes).encode()
    helpers = slurm_files.helpers_conf(HELPER).encode()
    key = subprocess.run(["head", "-c", "1024", "/dev/urandom"], capture_output=True, check=True).stdout
    etc_hosts = "".join(f"{h.address} {h.name} {MARK}\\n" for h in every)

    def prepare(host: harness.TestHost) -> None:
        ssh(
            testhosts,
            host,
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq"
            " --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null"
            f" && printf '{etc_hosts}' >> /etc/hosts",
        )
        _put(
            testhosts,
            host,
            key,
            "cat > /etc/munge/munge.key && chown munge: /etc/munge/munge.key"
            " && chmod 400 /etc/munge/munge.key && systemctl restart munge",
        )
        _put(testhosts, host, conf, "cat > /etc/slurm/slurm.conf")
        _put(testhosts, host, helpers, "cat > /etc/slurm/helpers.conf")  # slurmctld reads it too
        if host != controller:
            _put(testhosts, host, _payload(spec), "tar -C / --no-same-owner -xf -")
            # The stand-in kernel log (the containers have no /dev/kmsg), only where none is.
            ssh(testhosts, host, f"[ -e /dev/kmsg ] || {{ : > /dev/kmsg && touch {ROOT}/made-kmsg; }}")

    with ThreadPoolExecutor(len(every)) as pool:
        list(pool.map(prepare, every))
    cluster = Cluster(testhosts, controller, cluster_nodes, f"iniconfig-{version}.dist-info")
    try:
        cluster.ctl("systemctl restart slurmctld")
        _poll("slurmctld answers", lambda: cluster.on(controller, "sinfo", check=False) != "", 30)
        for node in cluster_nodes:
            cluster.on(node, "systemctl restart slurmd")
        _poll("both nodes idle", lambda: _states(cluster) == {n.name: "idle" for n in cluster_nodes}, 60)
        yield cluster
    finally:
        for host in every:
            ssh(
                testhosts,
                host,
                "systemctl stop slurmd slurmctld munge; rm -f /etc/slurm/slurm.conf /etc/slurm/helpers.conf;"
                f" [ -e {ROOT}/made-kmsg ] && rm -f /dev/kmsg; rm -rf {ROOT}; sed -i '/{MARK}/d' /etc/hosts",
                check=False,
            )


def _states(cluster: Cluster) -> dict[str, str]:
    out = cluster.on(cluster.controller, "sinfo -h -N -o '%N %T'", check=False)
    return {name: state.rstrip("*") for name, _, state in (ln.partition(" ") for ln in out.splitlines())}


def _ran_since(cluster: Cluster, node: harness.TestHost, at: int) -> bool:
    """provision-health ran on ``node`` after ``at`` (its state file is renamed into place each run)."""
    stamp = cluster.on(node, "stat -c %Y /var/lib/provision/health-state.json", check=False).strip()
    return stamp.isdigit() and int(stamp) > at


def _reason(cluster: Cluster, node: harness.TestHost) -> str:
    return cluster.ctl(f"sinfo -h -R -n {node.name} -o '%250E'").strip()  # %E alone is cut at 20


def test_drift_drains_restore_resumes_and_an_admin_drain_stays(slurm_cluster: Cluster) -> None:
    c = slurm_cluster
    sick, other = c.nodes
    away = f"{ROOT}/venv/{c.dist_info}.away"
    c.on(sick, f"mv {VENV_SITE}/{c.dist_info} {away}")
    try:
        c.ctl(f"scontrol update nodename={other.name} state=drain reason=maintenance")
        drained_at = int(c.on(other, "date +%s"))
        _poll(f"{sick.name} drained", lambda: _reason(c, sick).startswith("provision-health:"), 3 * INTERVAL)
        version = c.dist_info.removesuffix(".dist-info").split("-")[1]
        assert _reason(c, sick) == f"provision-health: drift iniconfig: locked {version}, found none"
        sinfo = c.ctl("sinfo -R -o '%250E|%N'")
        assert sorted(ln.replace(" ", "") for ln in sinfo.splitlines()[1:]) == sorted(
            [f"maintenance|{other.name}", f"provision-health:driftiniconfig:locked{version},foundnone|{sick.name}"]
        )
    finally:
        c.on(sick, f"mv {away} {VENV_SITE}/{c.dist_info}")
    _poll(f"{sick.name} idle again", lambda: _states(c)[sick.name] == "idle" and not _reason(c, sick), 3 * INTERVAL)
    # A health check that found the admin's node healthy has run since its drain (the state file
    # provision-health rewrites each run is newer): the drain is still the admin's.
    _poll(f"a health check on {other.name}", lambda: _ran_since(c, other, drained_at), 3 * INTERVAL)
    assert _reason(c, other) == "maintenance" and _states(c)[other.name] == "drained"
    c.ctl(f"scontrol update nodename={other.name} state=resume")


def test_a_job_asking_for_provision_verified_never_runs_on_the_drifted_node(slurm_cluster: Cluster) -> None:
    c = slurm_cluster
    sick, good = c.nodes
    away = f"{ROOT}/venv/{c.dist_info}.away"
    assert "provision_verified" in c.ctl(f"sinfo -h -N -n {good.name} -o '%f'")
    c.on(sick, f"mv {VENV_SITE}/{c.dist_info} {away}")
    try:
        _poll(f"{sick.name} drained", lambda: _reason(c, sick).startswith("provision-health:"), 3 * INTERVAL)
        ids = [c.ctl("sbatch --parsable -C provision_verified -o /dev/null --wrap true").strip() for _ in range(4)]
        _poll("the jobs done", lambda: c.ctl("squeue -h -o %i").strip() == "", 60)
        for job in ids:
            shown = c.ctl(f"scontrol show job {job}")
            assert "JobState=COMPLETED" in shown and f" NodeList={good.name}\n" in shown, shown
    finally:
        c.on(sick, f"mv {away} {VENV_SITE}/{c.dist_info}")
    _poll(f"{sick.name} idle again", lambda: _states(c)[sick.name] == "idle", 3 * INTERVAL)


def test_slurmd_accepts_the_generated_gres_conf(slurm_cluster: Cluster) -> None:
    c = slurm_cluster
    node = c.nodes[1]
    gpus = [ProbedGpu(model="H100-SXM", pci_id="10de:2330")] * 2
    gres = slurm_files.gres_conf(node.name, gpus)
    conf = c.on(node, "cat /etc/slurm/slurm.conf")
    lines = [
        ln + f" Gres={slurm_files.gres_count(gpus)}" if ln.startswith(f"NodeName={node.name} ") else ln
        for ln in conf.splitlines()
    ]
    d = f"{ROOT}/gres-test"
    _put(
        c.hostset, node, ("GresTypes=gpu\n" + "\n".join(lines) + "\n").encode(), f"mkdir -p {d} && cat > {d}/slurm.conf"
    )
    _put(c.hostset, node, gres.encode(), f"cat > {d}/gres.conf && cp /etc/slurm/helpers.conf {d}/")
    # Stand-in device nodes (the NVIDIA driver's major 195), removed after.
    c.on(node, "mknod /dev/nvidia0 c 195 0 && mknod /dev/nvidia1 c 195 1")
    try:
        shown = c.on(node, f"slurmd -G -f {d}/slurm.conf 2>&1")
    finally:
        c.on(node, "rm -f /dev/nvidia0 /dev/nvidia1", check=False)
    assert "Gres Name=gpu Type=h100_sxm Count=2 Index=0" in shown and "File=/dev/nvidia[0-1]" in shown, shown
    assert "error" not in shown.lower(), shown
