"""The Slurm integration on a REAL Slurm cluster: Debian 12's slurmctld, slurmd, slurm-client and
munge (22.05) on the SSH test hosts, one controller and three compute nodes, shared by every test
here (one module-scoped cluster: the packages install once, in parallel on the four hosts; torn
down after the last test here, so its health checks and export timers, every 5 s on each node,
do not run on beside the later modules).

The issue's acceptance scenario: `provision up` (the real command, CPU torch from the local
wheelhouse, in a venv of this test's own) with ``integrations: {slurm, prometheus}`` lays out
provision-health, its Slurm programs, helpers.conf, gres.conf and the export timer on the two
compute nodes, after the Slurm packages are installed and before slurmd starts. Debian's
prometheus-node-exporter runs on both and is scraped over the bridge. slurm.conf is the test's
(provision never writes it), with the lines `up` prints from the same generator.

Issue 30's scenarios reuse that cluster and that `up`'s state DB: what Slurm makes of a drained
node's reboot (simulated with `slurmd -b`), then `up --rolling slurm` with lock B while a job runs
and `rollback --rolling slurm` of the first node back to lock A (the last test here).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.files import read_lock, write_lock
from provision.fleet import integrations, slurm_files
from provision.fleet.health_spec import LAST_VERIFY
from provision.fleet.rolling import UPGRADE_PREFIX, Rolling, slurm_hooks, upgrade_reason
from provision.fleet.state import State
from provision.model.facts import ProbedGpu
from provision.model.lock import Lock
from provision.remote.health.slurm import parse_node
from tests.hosts import harness
from tests.integration.roles_harness import cpu_torch_config, quote, ssh
from tests.integration.up_harness import run_up, up_args, up_env
from tests.support.locks import plus_uv
from tests.support.node_exporter import TEXTFILE_DIR, scrape
from tests.support.shadow_torch import SHADOW, shadow_text

pytestmark = pytest.mark.slow

INTERVAL = 5  # HealthCheckInterval and the export timer's, seconds: the deadlines are three of these
ROOT = "/opt/provision-slurm-test"  # this test's own folder on the hosts (the venv), never /opt/provision
VENV = f"{ROOT}/venv"
VENV_SITE = f"{VENV}/lib/python3.11/site-packages"
PROGRAM, HELPER = integrations.SLURM_PROGRAM, integrations.SLURM_HELPER
MARK = "# provision-slurm-test"
JOBCOMP = "/var/lib/slurm/slurmctld/jobcomp.log"
CONFIG = (
    f"integrations: {{slurm: {{enabled: true, health_check_interval: {INTERVAL}}},"
    f" prometheus: {{textfile_dir: {TEXTFILE_DIR}}}, export_interval: {INTERVAL}}}\n"
)
# what `up` left on a compute node, removed after the tests (the later modules expect fresh hosts)
UP_LEFT = (
    "systemctl disable --now provision-health-export.timer >/dev/null 2>&1;"
    " rm -f /etc/systemd/system/provision-health-export.service /etc/systemd/system/provision-health-export.timer;"
    " systemctl daemon-reload; rm -rf /usr/local/lib/provision /usr/local/sbin/provision-health /etc/provision"
    " /var/lib/provision /tmp/provision-verify.*"
)


@dataclass(frozen=True)
class Cluster:
    hostset: harness.HostSet
    controller: harness.TestHost
    nodes: tuple[harness.TestHost, ...]  # three
    wheelhouse: Path
    work: Path  # the session `up`'s folder: its state DB (.provision/) and run
    up_args: tuple[str, ...]  # that `up`'s command line, less its --limit
    up_run: str

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
        # Slurm's job-completion log, one line per ended job with its JobState (slurm.conf(5)
        # JobCompType/JobCompLoc, "must be writable by user SlurmUser": StateSaveLocation is;
        # the line's form: src/plugins/jobcomp/filetxt/jobcomp_filetxt.c JOB_FORMAT, Slurm 22.05)
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={JOBCOMP}",
        # The lines docs/how-to/slurm.md tells users to add, from the generator `up` prints them with.
        *slurm_files.slurm_conf_lines(PROGRAM, INTERVAL, {n.name: [] for n in nodes}),
        *(f"NodeName={n.name} NodeAddr={n.address} CPUs=1 State=UNKNOWN" for n in nodes),
        f"PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


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


@pytest.fixture(scope="module")
def slurm_cluster(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    assert len(testhosts.hosts) >= 4, "the Slurm cluster takes four test hosts (PROVISION_TESTHOSTS)"
    controller, *nodes = testhosts.hosts[-4:]
    cluster_nodes = tuple(nodes)
    every = [controller, *cluster_nodes]
    conf = _slurm_conf(controller, cluster_nodes).encode()
    key = subprocess.run(["head", "-c", "1024", "/dev/urandom"], capture_output=True, check=True).stdout
    etc_hosts = "".join(f"{h.address} {h.name} {MARK}\\n" for h in every)

    def prepare(host: harness.TestHost) -> None:
        exporter = " prometheus-node-exporter" if host != controller else ""
        ssh(
            testhosts,
            host,
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq"
            f" --no-install-recommends slurmctld slurmd slurm-client munge{exporter} >/dev/null"
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
        if host == controller:  # slurmctld reads helpers.conf too; the nodes get theirs from `up`
            _put(testhosts, host, slurm_files.helpers_conf(HELPER).encode(), "cat > /etc/slurm/helpers.conf")

    with ThreadPoolExecutor(len(every)) as pool:
        list(pool.map(prepare, every))
    work = tmp_path_factory.mktemp("slurm-up")
    try:
        inventory = work / "inventory.ini"
        inventory.write_text(
            "".join(
                ln + "\n" for ln in testhosts.inventory.read_text().splitlines() if not ln.startswith(controller.name)
            )
        )
        config = cpu_torch_config(work, testhosts, wheelhouse, venv=VENV, extra=CONFIG)
        limit = ",".join(n.name for n in cluster_nodes)
        args = up_args(testhosts, config, inventory=inventory)
        ran = subprocess.run(
            [*args, "--limit", limit], cwd=work, capture_output=True, text=True, env=up_env(), timeout=1500
        )
        assert ran.stdout.strip(), ran.stderr[-3000:]
        doc = json.loads(ran.stdout)
        assert ran.returncode == 0 and [h["verdict"] for h in doc["hosts"]] == ["pass"] * len(cluster_nodes), doc
        for node in cluster_nodes:  # the verdict provision-health reads, written by up after its job
            recorded = ssh(testhosts, node, f"cat {LAST_VERIFY} 2>&1", check=False)
            assert '"verdict": "pass"' in recorded, (node.name, recorded, ran.stderr[-3000:])
        cluster = Cluster(testhosts, controller, cluster_nodes, wheelhouse, work, tuple(args), doc["run"])
        cluster.ctl("systemctl restart slurmctld")
        _poll("slurmctld answers", lambda: cluster.on(controller, "sinfo", check=False) != "", 30)
        for node in cluster_nodes:
            cluster.on(node, "systemctl restart slurmd")
        _poll("the nodes idle", lambda: _states(cluster) == {n.name: "idle" for n in cluster_nodes}, 60)
        yield cluster
    finally:
        for host in every:
            ssh(
                testhosts,
                host,
                "systemctl stop slurmd slurmctld munge; rm -f /etc/slurm/slurm.conf /etc/slurm/helpers.conf"
                f" /etc/slurm/gres.conf; rm -rf {ROOT}; sed -i '/{MARK}/d' /etc/hosts; {UP_LEFT};"
                " apt-get purge -y -q prometheus-node-exporter >/dev/null 2>&1; deluser --quiet prometheus 2>/dev/null;"
                " rm -rf /var/lib/prometheus",
                check=False,
            )


def _states(cluster: Cluster) -> dict[str, str]:
    out = cluster.on(cluster.controller, "sinfo -h -N -o '%N %T'", check=False)
    return {name: state.rstrip("*") for name, _, state in (ln.partition(" ") for ln in out.splitlines())}


def _ran_since(cluster: Cluster, node: harness.TestHost, at: int) -> bool:
    """Slurm's health check ran on ``node`` after ``at`` (its own state file, renamed into place
    each run; the export timer's runs keep another)."""
    stamp = cluster.on(node, f"stat -c %Y {integrations.SLURM_STATE}", check=False).strip()
    return stamp.isdigit() and int(stamp) > at


def _reason(cluster: Cluster, node: harness.TestHost) -> str:
    return cluster.ctl(f"sinfo -h -R -n {node.name} -o '%250E'").strip()  # %E alone is cut at 20


def _samples(node: harness.TestHost, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    try:
        return scrape(node.address).get(name, {})
    except OSError:  # node_exporter not listening yet
        return {}


def test_drift_drains_jobs_go_elsewhere_restore_resumes_and_an_admin_drain_stays(slurm_cluster: Cluster) -> None:
    """The issue's scenario on what `up` laid out: torch uninstalled from one node's venv drains it
    within three intervals with a reason naming torch, node_exporter shows the drift there and
    another node's passed verify, `-C provision_verified` jobs run only on the other nodes, an
    admin's `maintenance` drain stays, and torch reinstalled returns the node to idle."""
    c = slurm_cluster
    sick, good, _ = c.nodes
    healthy = {n.name for n in c.nodes if n != sick}
    assert "provision_verified" in c.ctl(f"sinfo -h -N -n {good.name} -o '%f'")
    torch = harness.TORCH_CPU.split("==")[1]  # the version the CPU stack locks (with +cpu)
    wheel = next(c.wheelhouse.glob(f"torch-{torch}+cpu-*.whl"))
    c.on(sick, f"{VENV}/bin/pip uninstall -q -y torch")
    try:
        _poll(f"{sick.name} drained", lambda: _reason(c, sick).startswith("provision-health:"), 3 * INTERVAL)
        reason = _reason(c, sick)
        assert reason.startswith(f"provision-health: drift torch: locked {torch}"), reason
        assert reason.endswith(", found none"), reason

        # node_exporter, scraped over the bridge: the drift on the sick node, a passed verify on the good one
        def drift_shown() -> bool:
            samples = _samples(sick, "provision_drift").items()
            return any(dict(k)["component"] == "torch" and dict(k)["found"] == "none" and v == 1.0 for k, v in samples)

        _poll("the drift in node_exporter's scrape", drift_shown, 3 * INTERVAL)
        passed = _samples(good, "provision_verify_pass")
        # seen once as {(): 0}, cause not found: what the node had then, to find it the next time
        why = (
            f"cat {LAST_VERIFY}; echo; ls -l --time-style=full-iso {TEXTFILE_DIR}; date; provision-health --json;"
            " systemctl list-timers provision-health-export.timer --no-pager;"
            " journalctl -u provision-health-export --no-pager -n 5"
        )
        assert passed == {(): 1.0}, (passed, c.on(good, why, check=False))
        assert _samples(good, "provision_health_ok") == {(): 1.0}
        # jobs asking for the feature run on the other nodes only
        ids = [c.ctl("sbatch --parsable -C provision_verified -o /dev/null --wrap true").strip() for _ in range(4)]
        _poll("the jobs done", lambda: c.ctl("squeue -h -o %i").strip() == "", 60)
        for job in ids:
            shown = c.ctl(f"scontrol show job {job}")
            ran_on = re.search(r" NodeList=(\S+)\n", shown)
            assert "JobState=COMPLETED" in shown and ran_on and ran_on[1] in healthy, shown
        # an admin's drain of the good node
        c.ctl(f"scontrol update nodename={good.name} state=drain reason=maintenance")
        drained_at = int(c.on(good, "date +%s"))
        sinfo = c.ctl("sinfo -R -o '%250E|%N'")
        assert sorted(ln.split("|")[1] for ln in sinfo.splitlines()[1:]) == sorted([good.name, sick.name]), sinfo
        print(c.ctl("sinfo -R -o '%70E %N'"))  # shown with -rP: docs/how-to/slurm.md's real output
    finally:
        c.on(sick, f"{VENV}/bin/pip install -q --no-index --no-deps {wheel}")
    _poll(f"{sick.name} idle again", lambda: _states(c)[sick.name] == "idle" and not _reason(c, sick), 3 * INTERVAL)
    # A health check that found the admin's node healthy has run since its drain: the drain is still the admin's.
    _poll(f"a health check on {good.name}", lambda: _ran_since(c, good, drained_at), 3 * INTERVAL)
    assert _reason(c, good) == "maintenance" and _states(c)[good.name] == "drained"
    c.ctl(f"scontrol update nodename={good.name} state=resume")


def test_up_wrote_slurms_files_and_slurmd_accepts_the_gres_conf(slurm_cluster: Cluster) -> None:
    c = slurm_cluster
    node = c.nodes[1]
    # what `up` wrote (no GPU on a test host: a gres.conf with provision's mark only)
    assert c.on(node, "cat /etc/slurm/gres.conf") == integrations.MARK + "\n"
    assert c.on(node, "cat /etc/slurm/helpers.conf").splitlines()[1] == slurm_files.helpers_conf(HELPER).strip()
    assert c.on(node, f"stat -c %a {PROGRAM} {HELPER}").split() == ["755", "755"]
    assert c.on(node, "systemctl is-active provision-health-export.timer").strip() == "active"
    # a gres.conf for two GPUs, as `up` writes it for a host with them, taken by the real slurmd -G
    gpus = [ProbedGpu(model="H100-SXM", pci_id="10de:2330")] * 2
    gres = f"{integrations.MARK}\n{slurm_files.gres_conf(None, gpus)}"
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


def _node(cluster: Cluster, node: harness.TestHost) -> dict[str, str]:
    """``scontrol show node``'s fields, read by provision-health's own parser (State is the base
    state then each +FLAG; Reason without scontrol's [user@time] stamp, "" when there is none)."""
    fields = parse_node(cluster.ctl(f"scontrol show node {node.name}"))
    return {**fields, "Reason": fields.get("Reason", "")}


# the package's /etc/default/slurmd (if any) kept aside while the test writes its own, and put back
_SLURMD_DEFAULTS_SAVE = (
    "if [ -e /etc/default/slurmd ]; then cp -a /etc/default/slurmd /etc/default/slurmd.test;"
    " else : > /etc/default/slurmd.test-absent; fi"
)
_SLURMD_DEFAULTS_BACK = (
    "if [ -e /etc/default/slurmd.test-absent ]; then rm -f /etc/default/slurmd /etc/default/slurmd.test-absent;"
    " else mv /etc/default/slurmd.test /etc/default/slurmd; fi"
)


def _slurmctld_has(cluster: Cluster, key: str, value: str) -> bool:
    """slurmctld runs with ``key = value`` (scontrol(1) "show config": one "Key = Value" line each)."""
    out = cluster.on(cluster.controller, "scontrol show config", check=False)
    return any(k.strip() == key and v.strip() == value for k, _, v in (ln.partition("=") for ln in out.splitlines()))


def _simulated_reboot(cluster: Cluster, node: harness.TestHost) -> None:
    """What a reboot looks like to Slurm, on a test host that cannot reboot: slurmd restarted with
    ``-b`` ("Report node rebooted when daemon restarted. Used for testing purposes.", slurmd(8)),
    through the unit's SLURMD_OPTIONS (EnvironmentFile=-/etc/default/slurmd, Slurm's
    etc/slurmd.service.in), polled until slurmctld has the new boot time. Down for 2 s, as a reboot
    is for longer: slurmctld takes a registration for a reboot only when the boot time is later
    than the node's last response, in whole seconds (validate_node_specs, boot_time >
    last_response); a restart at once after `scontrol reconfigure` was seen taken for none."""
    booted = _node(cluster, node)["BootTime"]
    cluster.on(
        node,
        "echo SLURMD_OPTIONS=-b > /etc/default/slurmd && systemctl stop slurmd && sleep 2 && systemctl start slurmd",
    )
    _poll(f"{node.name} registered as rebooted", lambda: _node(cluster, node)["BootTime"] != booted, 30)


def _reconfigure(cluster: Cluster, return_to_service: str, health_check_s: int) -> None:
    """slurmctld with these two settings (slurm.conf edited, `scontrol reconfigure`), waited for."""
    cluster.ctl(
        f"sed -i 's/^ReturnToService=.*/ReturnToService={return_to_service}/;"
        f" s/^HealthCheckInterval=.*/HealthCheckInterval={health_check_s}/' /etc/slurm/slurm.conf"
        " && scontrol reconfigure"
    )
    _poll(
        f"slurmctld at ReturnToService={return_to_service}, HealthCheckInterval={health_check_s}",
        lambda: (
            _slurmctld_has(cluster, "ReturnToService", return_to_service)
            and _slurmctld_has(cluster, "HealthCheckInterval", f"{health_check_s} sec")
        ),
        30,
    )


def test_a_drained_node_rebooted_by_the_apply_stays_drained_with_its_reason_until_resumed(
    slurm_cluster: Cluster,
) -> None:
    """What --rolling relies on when the apply itself reboots a drained node (a new driver; the
    roles' ansible.builtin.reboot, not `scontrol reboot`: docs/how-to/rolling-upgrade.md says
    why): the node comes back out of service, still DRAIN with provision's reason, and only
    `state=resume` returns it. The reboot is SIMULATED (slurmd -b), under ReturnToService=2 (this
    cluster's) and 1 (set on the controller with `scontrol reconfigure`). Slurm 22.05's
    validate_node_specs (src/slurmctld/node_mgr.c): under 2 the node stays as it was, IDLE+DRAIN;
    under 0 or 1 a registration taken for a reboot makes it DOWN, keeping the DRAIN flag and the
    reason ("Node unexpectedly rebooted" only replaces no reason or "Not responding").

    slurmctld's health check is off for the reboots (HealthCheckInterval=0): it sends every node a
    REQUEST_HEALTH_CHECK each interval (src/slurmctld/ping_nodes.c run_health_check), and one the
    new slurmd answers before its registration is handled moves the node's last response to the
    boot time's second or later (_node_did_resp), so the registration is not taken for a reboot and
    the node stays IDLE+DRAIN under 1. Measured with the cluster's 5 s interval: 5 of 14 simulated
    reboots under 1 came back IDLE+DRAIN, none of 14 with the check off."""
    c = slurm_cluster
    node = c.nodes[2]
    reason = upgrade_reason("0123456789abcdef", "fedcba9876543210")
    c.on(node, _SLURMD_DEFAULTS_SAVE)
    try:
        for rts, state in (("2", "IDLE+DRAIN"), ("1", "DOWN+DRAIN")):
            _reconfigure(c, rts, 0)
            c.ctl(f"scontrol update nodename={node.name} state=drain reason={quote(reason)}")
            _simulated_reboot(c, node)
            shown = _node(c, node)
            print(f"ReturnToService={rts}: after the reboot State={shown['State']}")
            assert shown["State"] == state and shown["Reason"] == reason, (rts, shown)
            c.ctl(f"scontrol update nodename={node.name} state=resume")
            _poll(f"{node.name} idle after the resume", lambda: _node(c, node)["State"] == "IDLE", 30)
            assert _node(c, node)["Reason"] == "", rts
    finally:
        _reconfigure(c, "2", INTERVAL)
        c.on(node, f"{_SLURMD_DEFAULTS_BACK} && systemctl restart slurmd")
        c.on(c.controller, f"scontrol update nodename={node.name} state=resume", check=False)  # if a check failed
    _poll(f"{node.name} idle", lambda: _states(c)[node.name] == "idle", 30)


class NodeStates:
    """Every change of each node's state and reason as sinfo shows them, polled from the controller
    every half second while a `with` block runs (Slurm keeps no history of node states we can read
    back: slurmctld's log would need a debug level; sinfo(1) %T is the extended state: draining,
    drained, idle, allocated)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self._stop = cluster, threading.Event()
        self.seen: dict[str, list[tuple[str, str]]] = {}
        self.order: list[tuple[str, str]] = []  # (node, state) of every change, all nodes, in order
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            out = self.cluster.on(self.cluster.controller, "sinfo -h -N -o '%N|%T|%250E'", check=False)
            for line in out.splitlines():
                node, state, reason = [*line.split("|", 2), "", ""][:3]
                now = (state.rstrip("*"), reason.strip())
                if not self.seen.get(node) or self.seen[node][-1] != now:
                    self.seen.setdefault(node, []).append(now)
                    self.order.append((node, now[0]))
            self._stop.wait(0.5)

    def __enter__(self) -> NodeStates:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def states(self, node: str) -> list[str]:
        return [state for state, _ in self.seen.get(node, [])]


def test_a_rolling_upgrade_through_slurm_lets_the_job_finish_and_stops_at_a_failed_verify(
    slurm_cluster: Cluster,
) -> None:
    """Issue 30's rolling scenario on the real cluster, after the session's `up` (lock A): lock B
    (A plus one wheel) applied with `up --from-lock B --rolling slurm --max-unavailable 1`, the real
    scontrol run on the controller through --slurm-via (this machine has no Slurm client), while a
    60-second job (the issue's length) runs on the first node: the job COMPLETED in Slurm's
    job-completion log (not cancelled nor requeued), the first node went draining -> drained ->
    idle before the second was drained, and the second, whose verify fails (a stray torch.py, see
    tests/support/shadow_torch.py), stays drained with the `provision-upgrade: verify failed`
    reason (provision-health, which runs there every 5 s, leaves that drain alone), the third is
    never drained nor touched (its batch never starts), exit 1.

    No reboot: a lock with a driver change needs one, and the apply's own reboot happens while the
    node stays drained (provision/fleet/rolling.py says why not `scontrol reboot nextstate=RESUME`;
    what Slurm makes of that reboot is the test before this one)."""
    c = slurm_cluster
    first, second, third = c.nodes
    state = State(c.work / ".provision" / "state.db")
    old = {n.name: (state.host(n.name) or pytest.fail(f"{n.name} not in the state DB")).lock_hash for n in c.nodes}
    lock_a = read_lock(c.work / ".provision" / "runs" / c.up_run / "provision.lock")
    write_lock(Lock(lock_a.knowledge, [plus_uv(g, list(g.hosts)) for g in lock_a.groups]), c.work / "b.lock")
    job = c.ctl(f"sbatch --parsable -w {first.name} -o /dev/null --wrap 'sleep 60'").strip()
    _poll("the job running", lambda: c.ctl(f"squeue -h -j {job} -o %T").strip() == "RUNNING", 30)
    c.on(second, f"echo {quote(shadow_text('test_slurm'))} > {SHADOW}")
    via = f"ssh -F {c.hostset.ssh_config} {c.controller.name}"
    rolling = ("--rolling", "slurm", "--max-unavailable", "1", "--drain-timeout", "180", "--slurm-via", via)
    limit = ("--limit", ",".join(n.name for n in c.nodes))
    started = time.monotonic()
    try:
        with NodeStates(c) as seen:
            rc, doc = run_up(c.work, [*c.up_args, *limit, "--from-lock", "b.lock", *rolling])
            ran_s = time.monotonic() - started
            # provision-health runs on the failed node at least once more: the drain stays ours
            at = int(c.on(second, "date +%s"))
            _poll(f"a health check on {second.name}", lambda: _ran_since(c, second, at), 3 * INTERVAL)
    finally:
        c.on(second, f"rm -f {SHADOW}")
    print(f"rolling run: {ran_s:.1f} s; states: {seen.seen}")
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 1 and hosts[first.name]["verdict"] == "pass" and hosts[second.name]["verdict"] == "fail", doc
    assert hosts[third.name]["verdict"] == "not-run" and hosts[third.name]["changed"] == 0, doc
    new = {n.name: (state.host(n.name) or pytest.fail(f"{n.name} not in the state DB")).lock_hash for n in c.nodes}
    assert new[first.name] != old[first.name] and new[third.name] == old[third.name]

    # the job ran its 60 s to the end: Slurm's completion record says so
    record = [ln for ln in c.ctl(f"cat {JOBCOMP}").splitlines() if ln.startswith(f"JobId={job} ")]
    assert len(record) == 1 and " JobState=COMPLETED " in record[0], record
    assert ran_s > 40  # the run waited for the job (started right before it)

    # the first node: drained while the job ran, drained once it ended, idle after its verify
    states = seen.states(first.name)
    assert states[-1] == "idle", seen.seen
    at_drain = states.index("draining")
    assert states[at_drain:] == ["draining", "drained", "idle"], seen.seen
    reasons = [reason for _, reason in seen.seen[first.name][at_drain:-1]]
    assert set(reasons) == {f"provision-upgrade: {old[first.name]} -> {new[first.name]}"}, seen.seen
    # the second was drained only after the first was back, and stays drained with why
    assert seen.states(second.name)[:2] == ["idle", "drained"], seen.seen
    back = seen.order.index((first.name, "idle"), seen.order.index((first.name, "drained")))
    assert seen.order.index((second.name, "drained")) > back, seen.order
    assert _states(c)[second.name] == "drained"
    # the third: never drained, still on lock A
    assert seen.states(third.name) == ["idle"], seen.seen
    reason = _reason(c, second)
    assert reason.startswith("provision-upgrade: verify failed: import: torch is not importable"), reason
    print(c.ctl("sinfo -R -o '%70E %N'"))  # docs/how-to/rolling-upgrade.md's real output
    c.ctl(f"scontrol update nodename={second.name} state=resume")

    # `rollback --rolling slurm` on the first node: drained with the reason B -> A, lock A applied
    # and verified, resumed; the state DB says it runs A again, rolled back from B
    hash_a, hash_b = old[first.name], new[first.name]
    assert hash_a and hash_b
    rollback = [*c.up_args, "--limit", first.name, *rolling]
    rollback[rollback.index("up")] = "rollback"
    with NodeStates(c) as seen:
        rc, doc = run_up(c.work, rollback)
    print(f"rollback run: states: {seen.seen}")  # docs/how-to/rolling-upgrade.md's real output
    assert rc == 0 and [(h["host"], h["verdict"]) for h in doc["hosts"]] == [(first.name, "pass")], doc
    assert doc["rollback"] == [{"host": first.name, "from": hash_b, "to": hash_a, "run": c.up_run}], doc
    assert seen.states(first.name)[-2:] == ["drained", "idle"], seen.seen
    # sinfo's %E prints "none" for no reason
    assert {r for _, r in seen.seen[first.name][:-1] if r != "none"} == {upgrade_reason(hash_b, hash_a)}, seen.seen
    [latest, *_] = state.history()[first.name]
    assert (latest.lock_hash, latest.verdict, latest.rolled_back_from) == (hash_a, "pass", hash_b), latest
    # no other node drained for it (the second may be drained again by provision-health: its last
    # verify failed, so the resume above does not last)
    assert seen.states(third.name) == ["idle"], seen.seen
    assert not any(r.startswith(UPGRADE_PREFIX) for _, r in seen.seen[second.name]), seen.seen

    # the loop's own round trips with the real scontrol through --slurm-via, on the idle first
    # node (benchmarks/bench_rolling.py --via; figures, never asserted: the machines are shared)
    loop = Rolling(slurm_hooks(via, 60))
    t0 = time.perf_counter()
    loop.drain(first.name, upgrade_reason("bench-old", "bench-new"))
    t1 = time.perf_counter()
    loop.wait_idle(first.name)
    t2 = time.perf_counter()
    loop.resume(first.name)
    t3 = time.perf_counter()
    print(f"rolling loop, real scontrol: drain {t1 - t0:.3f} s, wait {t2 - t1:.3f} s, resume {t3 - t2:.3f} s")
    assert _states(c)[first.name] == "idle"
