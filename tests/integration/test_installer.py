"""install.installer uv on a test host: python_env installs the knowledge's uv from the
wheelhouse, the frameworks role installs the lock's closure with `uv pip install --require-hashes
--no-deps`, the venv holds exactly the closure, and a second run changes nothing."""

from __future__ import annotations

from pathlib import Path

from packaging.utils import canonicalize_name

from provision.fleet.closure import lock_closures
from provision.matrix import load
from provision.model.settings import InstallSettings, PipSettings
from provision.stack.lock import LockGroup
from tests.hosts import harness
from tests.integration import roles_harness as rh


def test_uv_installs_exactly_the_locked_closure_and_converges(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    host = testhosts.hosts[0]
    group = rh.lock_group("cpu", [host.name], os="debian-12", frameworks=[f"{harness.TORCH_CPU}+cpu"])
    install = InstallSettings(pip=PipSettings(find_links=(str(wheelhouse),)), installer="uv")
    locked = LockGroup.from_json(group)
    [locked] = lock_closures([locked], install, {"frameworks_no_index": True}, cache=tmp_path / "cache")
    group["python_packages"] = locked.to_json()["python_packages"]
    # the hosts reach no index: uv and the closure both come from the wheelhouse alone
    overrides = {"frameworks_no_index": True, "python_env_pip_args": ["--no-index", f"--find-links={wheelhouse}"]}

    first = rh.apply(
        rh.render(tmp_path / "run1", testhosts, host, group, install=install, overrides=overrides), host.name
    )
    assert first.rc == 0 and first.changed > 0, first.output[-3000:]
    # every distribution of the closure was installed by uv (its INSTALLER record), none by pip
    installers = rh.ssh(
        testhosts, host, "grep -h . /opt/provision/venv/lib/python3*/site-packages/*.dist-info/INSTALLER"
    )
    assert installers.split().count("uv") == len(group["python_packages"]), installers
    sp = load().t.standalone_python
    assert sp is not None
    assert rh.ssh(testhosts, host, "/opt/provision/uv/bin/uv --version").split()[:2] == ["uv", sp.uv]
    freeze = rh.ssh(testhosts, host, "/opt/provision/venv/bin/python -m pip freeze --all --exclude pip")
    installed = {canonicalize_name(n): v for n, _, v in (ln.partition("==") for ln in freeze.split())}
    assert installed == {canonicalize_name(p["name"]): p["version"] for p in group["python_packages"]}
    out = rh.ssh(testhosts, host, "/opt/provision/venv/bin/python -c 'import torch; print(torch.ones(3).sum().item())'")
    assert out.split() == ["3.0"]

    second = rh.apply(
        rh.render(tmp_path / "run2", testhosts, host, group, install=install, overrides=overrides), host.name
    )
    assert second.rc == 0 and second.changed == 0, second.output[-3000:]
