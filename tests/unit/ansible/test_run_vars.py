"""The run dir's role variables kept in memory (``RunDir.vars``, ``PlanResult.run_vars``): `up`'s
fleet cache takes them instead of reading back the YAML the same run just wrote (issue 26), so
they must say exactly what the written files say. Each case writes a real run dir with
write_run_dir and reads its files back here, as the cache did before, to compare.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ansible.rundir import write_run_dir
from provision.fleet.cache.wheels import WheelSet
from provision.model import Lock
from provision.model.settings import AptSettings, InstallSettings, PipSettings

GOLDEN = Path(__file__).parents[1] / "golden" / "render"
PLAIN = InstallSettings(
    pip=PipSettings(find_links=("/srv/wheels",)), apt=AptSettings(proxy="http://proxy.example:3128")
)
# index logins: the controller's pip gets them from secrets.yml's netrc file
WITH_LOGINS = InstallSettings(
    pip=PipSettings(
        index_url="https://alice:s3cr3t-index@mirror.example/simple",
        extra_index_urls=("https://bob:s3cr3t-extra@extra.example:8443/simple",),
    ),
    apt=AptSettings(proxy="http://carol:s3cr3t-proxy@proxy.example:3128"),
)


def _two_group_lock(os_id: str) -> Lock:
    """The golden lock's group twice, under two names, with two hosts each (``a`` gets a second
    group that differs, so the hosts' groups are told apart)."""
    lock = Lock.from_json(json.loads((GOLDEN / f"{os_id}.lock").read_text()))
    g = lock.groups[0]
    return replace(
        lock,
        groups=[
            replace(g, name="alpha", hosts=["h1", "h2"]),
            replace(g, name="beta", hosts=["h3", "h4"], python_packages=[]),
        ],
    )


def _read_back(ansible: Path) -> dict[str, Any]:
    """What the fleet cache read from the run dir before it took the record (its old code)."""
    inventory = yaml.safe_load((ansible / "inventory.yml").read_text())
    group_of = {
        h: g
        for g, body in inventory["all"]["children"].items()
        if (ansible / "group_vars" / f"{g}.yml").is_file()
        for h in (body.get("hosts") or {})
    }
    groups = {
        g: yaml.safe_load((ansible / "group_vars" / f"{g}.yml").read_text()) or {} for g in set(group_of.values())
    }
    secrets_path = ansible / "secrets.yml"
    secrets = (yaml.safe_load(secrets_path.read_text()) or {}) if secrets_path.exists() else {}
    netrc = "".join(f["content"] for f in secrets.get("provision_credential_files") or [] if f["name"] == "netrc")
    everyone = yaml.safe_load((ansible / "group_vars" / "all.yml").read_text()) or {}
    return {"group_of": group_of, "groups": groups, "everyone": everyone, "netrc": netrc}


@pytest.mark.parametrize(
    ("os_id", "install", "overrides"),
    [
        ("ubuntu-22.04", PLAIN, None),
        ("debian-12", WITH_LOGINS, {"frameworks_find_links": "/a,/b", "preflight_min_free_gib": "50"}),
        ("rhel-9", WITH_LOGINS, {"frameworks_no_index": "yes"}),
    ],
)
def test_run_vars_say_what_the_written_files_say(
    tmp_path: Path, os_id: str, install: InstallSettings, overrides: dict[str, Any] | None
) -> None:
    lock = _two_group_lock(os_id)
    hosts = {h: {"ansible_host": f"10.0.0.{i}"} for i, h in enumerate(["h1", "h2", "h3", "h4"], 1)}
    user_groups = {"rack1": {"hosts": ["h1", "h3"], "children": []}}
    out = tmp_path / "ansible"
    run = write_run_dir(
        out, lock, "{}", hosts, install, overrides=overrides, user_groups=user_groups, run="20261204-000000-abcd"
    )
    back = _read_back(out)
    assert dict(run.vars.group_of) == back["group_of"] == {"h1": "alpha", "h2": "alpha", "h3": "beta", "h4": "beta"}
    assert {g: dict(v) for g, v in run.vars.groups.items()} == back["groups"]
    assert dict(run.vars.everyone) == back["everyone"]
    assert "provision_environment" in back["everyone"]
    assert run.vars.netrc == back["netrc"]
    assert bool(run.vars.netrc) == (install is WITH_LOGINS)
    # what the cache builds from them is the same: the wheels each host's group installs
    built = []
    for host, group in back["group_of"].items():
        h = next(g.host for g in lock.groups if host in g.hosts)
        from_record = WheelSet.from_group_vars(
            run.vars.groups[group], python=h.python, arch=h.arch, netrc=run.vars.netrc
        )
        from_files = WheelSet.from_group_vars(back["groups"][group], python=h.python, arch=h.arch, netrc=back["netrc"])
        assert from_record == from_files
        built.append(from_record)
    assert any(w is not None and w.installs for w in built)  # the golden locks install frameworks
