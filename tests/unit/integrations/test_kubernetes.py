"""node-problem-detector's custom plugin monitor config for provision-health, held to NPD's own
definition of it: the example config NPD ships (tests/unit/fixtures/npd/custom-plugin-monitor.json,
kubernetes/node-problem-detector config/custom-plugin-monitor.json at commit
30c04da5524f9846c284a7888220edbe72e99fec, copied as it is), the JSON fields of its config types and
the checks of its Validate() (pkg/custompluginmonitor/types/config.go, types.go). The rule's
command is then run as NPD runs it (path and args, from another directory) against the stand-in
host of tests/support/health_host.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provision.integrations import kubernetes
from provision.remote.health import SOURCES, check
from tests import fakenvml
from tests.support.health_host import make_host

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "npd" / "custom-plugin-monitor.json"
# The json tags of NPD's CustomPluginConfig, pluginGlobalConfig, CustomRule and Condition.
FIELDS = {
    "top": {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"},
    "pluginConfig": {
        "invoke_interval",
        "timeout",
        "max_output_length",
        "concurrency",
        "enable_message_change_based_condition_update",
        "skip_initial_status",
    },
    "rule": {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"},
    "condition": {"type", "reason", "message"},
}
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")  # time.ParseDuration's units


def seconds(duration: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ns|us|µs|ms|s|m|h)", duration))


def same_shape(ours: dict[str, Any], theirs: dict[str, Any], where: str) -> None:
    """Every key of NPD's example is in ours, with a value of the same JSON type."""
    for key, value in theirs.items():
        assert key in ours, f"{where}.{key} missing"
        assert type(ours[key]) is type(value), f"{where}.{key}: {type(ours[key])} vs {type(value)}"


def test_the_config_has_the_shape_of_npds_own_example() -> None:
    ours = kubernetes.npd_custom_plugin_monitor("/opt/provision")
    theirs = json.loads(EXAMPLE.read_text())
    same_shape(ours, theirs, "config")
    same_shape(ours["pluginConfig"], theirs["pluginConfig"], "pluginConfig")
    same_shape(ours["conditions"][0], theirs["conditions"][0], "conditions[0]")
    same_shape(ours["rules"][0], theirs["rules"][0], "rules[0]")
    assert set(ours) <= FIELDS["top"] and set(ours["pluginConfig"]) <= FIELDS["pluginConfig"]
    assert all(set(r) <= FIELDS["rule"] for r in ours["rules"])
    assert all(set(c) <= FIELDS["condition"] for c in ours["conditions"])
    assert all(isinstance(a, str) for a in ours["rules"][0]["args"])  # Args []string


def test_the_config_passes_npds_validation() -> None:
    """What Validate() and ApplyConfiguration() check at NPD's start."""
    config = kubernetes.npd_custom_plugin_monitor("/opt/provision", interval_s=30, timeout_s=10)
    assert config["plugin"] == "custom"
    glob = config["pluginConfig"]
    for duration in (glob["invoke_interval"], glob["timeout"], *(r["timeout"] for r in config["rules"])):
        assert GO_DURATION.match(duration), duration
    defaults = {c["type"] for c in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] in ("temporary", "permanent")
        assert seconds(rule["timeout"]) <= seconds(glob["timeout"])  # "plugin timeout is greater than global"
        assert rule["type"] != "permanent" or rule["condition"] in defaults  # "does not have preset default condition"
        assert os.path.exists(rule["path"])  # NPD stats the path: env(1), on every host
    assert seconds(glob["timeout"]) < seconds(glob["invoke_interval"])


def test_npds_statuses_are_provision_healths_exit_codes() -> None:
    assert kubernetes.NPD_STATUS == {"OK": 0, "NonOK": 1, "Unknown": 2}
    assert (check.HEALTHY, check.UNHEALTHY, check.UNKNOWN) == (0, 1, 2)


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"home": "opt/provision"}, "absolute path"),
        ({"home": "/opt", "timeout_s": 90}, "not be longer"),
        ({"home": "/opt", "host_root": "host"}, "host's root must be an absolute path"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        kubernetes.npd_custom_plugin_monitor(**kwargs)


@pytest.mark.parametrize(
    "host_root",
    [
        None,
        pytest.param(
            "/",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="chroot(8) needs root (NPD's DaemonSet is privileged)"),
        ),
    ],
)
def test_the_rule_runs_provision_health_as_npd_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_root: str | None
) -> None:
    """path + args from a directory that is not the program's: exit 0 and the line on stdout. With
    a host root the rule runs through a real chroot(8), into this machine's own / (a DaemonSet's
    would be the host's / mounted in NPD's container)."""
    host = make_host(tmp_path, fakenvml.build(tmp_path / "fakenvml"), monkeypatch)
    home = tmp_path / "opt-provision"
    (home / "health").mkdir(parents=True)
    for name, source in SOURCES.items():
        shutil.copy(source, home / "health" / name)
    spec = tmp_path / "health.json"
    spec.write_text(json.dumps(host["spec"]))
    config = kubernetes.npd_custom_plugin_monitor(
        str(home), python=shutil.which("python3") or "python3", spec=str(spec), host_root=host_root
    )
    rule = config["rules"][0]
    assert (rule["path"], rule["args"][0]) == (kubernetes.CHROOT, "/") if host_root else rule["path"] == "/usr/bin/env"
    r = host["roots"]
    args = [a if a != kubernetes.NPD_STATE else str(r.state) for a in rule["args"]]  # the stand-in's state
    stand_ins = ["--proc", str(r.proc), "--kmsg", str(r.kmsg), "--dpkg-query", r.dpkg_query]
    stand_ins += ["--systemctl", r.systemctl, "--nvml-library", r.nvml_library, "--last-verify", str(r.last_verify)]
    proc = subprocess.run([rule["path"], *args, *stand_ins], capture_output=True, text=True, cwd="/", timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "healthy\n"), proc.stderr
    assert len(proc.stdout) <= config["pluginConfig"]["max_output_length"]


def test_the_how_to_shows_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "how-to" / "kubernetes.md").read_text()
    assert "$ python -m provision.integrations.kubernetes --home /usr/local/lib/provision >" in page
    shown = re.search(r"```json\n(.*?)```", page, re.S)
    assert shown is not None
    assert kubernetes.main(["--home", "/usr/local/lib/provision"]) == 0
    assert capsys.readouterr().out == shown.group(1)


def test_a_bad_home_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubernetes.main(["--home", "opt/provision"]) == 2
    out = capsys.readouterr()
    assert (
        out.out == ""
        and out.err == "error: the provision-health folder must be an absolute path, not 'opt/provision'\n"
    )
