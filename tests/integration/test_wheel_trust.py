"""What the hosts install from an index is the file the lock or the knowledge pins, on Debian 12
SSH test hosts with a real local index: a directory served by http.server on the bridge address,
which pip and uv read as a simple index (its folder listings are PEP 503 pages). The wheels are
real: uv's own from the wheelhouse, and small ones built here with the same name and version as
the pinned files but other contents (what a mirror or an earlier install could hold).

- uv (python_env, which both the standalone CPython and install.installer uv use): an index that
  serves another `uv==<version>` wheel fails the host at the uv step, uv not installed; a uv of
  that version already in uv's venv is replaced by the pinned file.
- the closure (frameworks), with pip and with uv: a distribution of the locked name and version
  already in the venv but from another file is replaced by the locked file, and when the index
  offers only the other file the host fails naming the package.
"""

from __future__ import annotations

import contextlib
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.matrix import load
from provision.model.settings import InstallSettings, PipSettings
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.wheels import make_wheel, sha256

VENV = "/opt/provision/venv"
UV_VENV = "/opt/provision/uv"


@contextlib.contextmanager
def served(root: Path, address: str) -> Iterator[str]:
    """``root`` over HTTP on ``address``: ``<url>/simple/`` is a simple index of its folders."""
    handler = type("H", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *_a: None})
    server = http.server.ThreadingHTTPServer((address, 0), lambda *a: handler(*a, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{address}:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


def offer(index: Path, wheel: Path) -> None:
    """The index serves ``wheel`` (alone) as its project's file."""
    project = index / "simple" / wheel.name.split("-")[0].replace("_", "-").lower()
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    shutil.copy(wheel, project / wheel.name)


def run_dir(
    run: Path,
    testhosts: harness.HostSet,
    host: harness.TestHost,
    url: str,
    *,
    installer: str,
    closure: list[dict[str, Any]],
    roles: tuple[str, ...] = ("python_env", "frameworks"),
) -> Path:
    """The run dir `plan` writes for a CPU torch lock group whose closure is ``closure``, every
    wheel and uv from the index at ``url``; site.yml keeps only ``roles``."""
    group = rh.lock_group("cpu", [host.name], os="debian-12", frameworks=[f"{harness.TORCH_CPU}+cpu"])
    group["python_packages"] = closure
    gateway = f"{testhosts.net}.1"
    install = InstallSettings(pip=PipSettings(index_url=url, trusted_hosts=(gateway,)), installer=installer)
    rh.render(run, testhosts, host, group, install=install)
    site = yaml.safe_load((run / "site.yml").read_text())
    site[0]["roles"] = [r for r in site[0]["roles"] if r["role"] in roles]
    (run / "site.yml").write_text(yaml.safe_dump(site, sort_keys=False))
    return run


def entry(wheel: Path, url: str) -> dict[str, Any]:
    name, version = wheel.name.split("-")[:2]
    return {"name": name, "version": version, "sha256": sha256(wheel), "url": f"{url}{name}/{wheel.name}", "index": url}


@pytest.fixture
def bridge_hosts(testhosts: harness.HostSet) -> Iterator[list[harness.TestHost]]:
    """Two hosts that reach the bridge address directly (the filtering proxy passes only PyPI and
    Debian), left without provision's venvs afterwards."""
    hosts = testhosts.hosts[:2]
    for h in hosts:
        rh.reach_bridge_directly(testhosts, h)
        rh.ssh(testhosts, h, "rm -rf /opt/provision")
    yield hosts
    rh.unprovision(testhosts, hosts)


def copy_to(testhosts: harness.HostSet, host: harness.TestHost, local: Path, remote: str) -> None:
    with local.open("rb") as f:
        subprocess.run(
            ["ssh", "-F", str(testhosts.ssh_config), host.name, f"cat > {remote}"], stdin=f, check=True, timeout=60
        )


def test_uv_is_installed_only_from_its_pinned_file(
    testhosts: harness.HostSet, bridge_hosts: list[harness.TestHost], wheelhouse: Path, tmp_path: Path
) -> None:
    host = bridge_hosts[0]
    sp = load().t.standalone_python
    assert sp is not None
    (real,) = wheelhouse.glob(f"uv-{sp.uv}-*x86_64*.whl")
    assert sha256(real) in sp.uv_wheels["x86_64"].values()
    # a uv of the pinned version under the real wheel's file name, whose `uv` leaves a mark when run
    built = make_wheel(
        tmp_path / "fake", "uv", sp.uv, who="fake", scripts={"uv": "#!/bin/sh\ntouch /tmp/fake-uv-ran\necho uv fake\n"}
    )
    fake = built.rename(built.parent / real.name)
    closure = [entry(make_wheel(tmp_path / "toy", "provtoy", "1.0", who="locked"), "")]  # uv installs a closure
    index = tmp_path / "index"
    offer(index, fake)
    with served(index, f"{testhosts.net}.1") as url:
        closure = [{**closure[0], "index": url}]
        # python_env alone: the step every use of uv goes through (the closure's installer, the standalone CPython)
        refused = rh.apply(
            run_dir(tmp_path / "run1", testhosts, host, url, installer="uv", closure=closure, roles=("python_env",)),
            host.name,
        )
        assert refused.rc != 0 and refused.failed == 1, refused.output[-3000:]
        failed_task = refused.output.rsplit("TASK [", 1)[1].split("]", 1)[0]
        assert failed_task == "python_env : Install uv by its pinned sha256", refused.output[-3000:]
        assert "DO NOT MATCH THE HASHES" in refused.output and sha256(fake) in refused.output, refused.output[-3000:]
        assert rh.ssh(testhosts, host, f"ls {UV_VENV}/bin/uv /tmp/fake-uv-ran 2>&1; true").count("No such file") == 2

        # the fake already in uv's venv (an earlier install from that mirror) is replaced by the pinned file
        copy_to(testhosts, host, fake, f"/tmp/{real.name}")
        rh.ssh(testhosts, host, f"{UV_VENV}/bin/python -m pip install -q --no-deps --no-index /tmp/{real.name}")
        assert rh.ssh(testhosts, host, f"{UV_VENV}/bin/uv --version").strip() == "uv fake"
        offer(index, real)
        fixed = rh.apply(
            run_dir(tmp_path / "run2", testhosts, host, url, installer="uv", closure=closure, roles=("python_env",)),
            host.name,
        )
        assert fixed.rc == 0 and fixed.changed > 0, fixed.output[-3000:]
        assert rh.ssh(testhosts, host, f"{UV_VENV}/bin/uv --version").split()[:2] == ["uv", sp.uv]
        again = rh.apply(
            run_dir(tmp_path / "run3", testhosts, host, url, installer="uv", closure=closure, roles=("python_env",)),
            host.name,
        )
        assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    rh.ssh(testhosts, host, f"rm -f /tmp/fake-uv-ran /tmp/{real.name}")


def _apply_both(
    tmp: Path, testhosts: harness.HostSet, hosts: dict[str, harness.TestHost], url: str, closure: list[dict[str, Any]]
) -> dict[str, rh.Outcome]:
    """One run per installer, side by side (one host each)."""
    procs = {
        installer: rh.start(run_dir(tmp / installer, testhosts, host, url, installer=installer, closure=closure))
        for installer, host in hosts.items()
    }
    return {installer: rh.finish(proc, hosts[installer].name) for installer, proc in procs.items()}


def test_a_foreign_file_of_a_locked_version_in_the_venv_is_replaced_or_the_host_fails_naming_it(
    testhosts: harness.HostSet, bridge_hosts: list[harness.TestHost], wheelhouse: Path, tmp_path: Path
) -> None:
    hosts = dict(zip(("pip", "uv"), bridge_hosts, strict=True))
    sp = load().t.standalone_python
    assert sp is not None
    (uv,) = wheelhouse.glob(f"uv-{sp.uv}-*x86_64*.whl")
    locked = make_wheel(tmp_path / "locked", "provtoy", "1.0", who="locked")
    foreign = make_wheel(tmp_path / "foreign", "provtoy", "1.0", who="foreign")
    assert sha256(locked) != sha256(foreign)
    who = f"{VENV}/bin/python -c 'import provtoy; print(provtoy.WHO)'"
    index = tmp_path / "index"
    offer(index, uv)
    offer(index, locked)

    def plant_foreign() -> None:
        for host in hosts.values():
            copy_to(testhosts, host, foreign, f"/tmp/{foreign.name}")
            rh.ssh(
                testhosts, host, f"{VENV}/bin/python -m pip install -q --force-reinstall --no-deps /tmp/{foreign.name}"
            )
            assert rh.ssh(testhosts, host, who).strip() == "foreign"

    with served(index, f"{testhosts.net}.1") as url:
        closure = [entry(locked, url)]
        first = _apply_both(tmp_path / "run1", testhosts, hosts, url, closure)
        for installer, outcome in first.items():
            assert outcome.rc == 0, (installer, outcome.output[-3000:])
            assert rh.ssh(testhosts, hosts[installer], who).strip() == "locked"

        # the same name and version from another file in the venv: replaced by the locked file
        plant_foreign()
        second = _apply_both(tmp_path / "run2", testhosts, hosts, url, closure)
        now = {installer: rh.ssh(testhosts, host, who).strip() for installer, host in hosts.items()}
        assert now == {"pip": "locked", "uv": "locked"}, {i: o.output[-3000:] for i, o in second.items()}
        for installer, outcome in second.items():
            assert outcome.rc == 0 and outcome.changed > 0, (installer, outcome.output[-3000:])
        # and a run after it changes nothing (the record says the venv holds the locked file)
        for installer, outcome in _apply_both(tmp_path / "run2b", testhosts, hosts, url, closure).items():
            assert outcome.rc == 0 and outcome.changed == 0, (installer, outcome.output[-3000:])

        # and when the index offers only the other file, the host fails naming the package (the
        # installers' caches emptied: uv would take the locked file from its own, rightly)
        plant_foreign()
        offer(index, foreign)
        for host in hosts.values():
            rh.ssh(testhosts, host, "rm -rf /root/.cache/uv /root/.cache/pip")
        third = _apply_both(tmp_path / "run3", testhosts, hosts, url, closure)
        mismatch = {"pip": "DO NOT MATCH THE HASHES", "uv": "Hash mismatch for `provtoy==1.0`"}
        for installer, outcome in third.items():
            assert outcome.rc != 0 and outcome.failed == 1, (installer, outcome.output[-3000:])
            assert mismatch[installer] in outcome.output and "provtoy" in outcome.output, outcome.output[-3000:]
    for host in hosts.values():
        rh.ssh(testhosts, host, f"rm -f /tmp/{foreign.name}")
