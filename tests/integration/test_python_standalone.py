"""python_env with a standalone CPython: uv installs it from a local mirror, the venv is built with
it, torch runs in that venv, a second run changes nothing, and a download whose sha256 differs from
the list's is refused with nothing half-built. Then back to the OS's Python: the venv is rebuilt.

The standalone CPython here is a STAND-IN (tests/hosts/standalone_python.py): python-build-standalone's
releases are out of reach, so the mirror holds an archive of the same shape made from the CPython that
runs the tests, with a download list in uv's own format; uv (the real one, from PyPI) does the rest.
The Debian 12 host has Python 3.11 itself, so the lock asks for python_source standalone; the choice
under auto (standalone only when no OS Python fits) is the resolver's, tested in test_resolve_cases.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.matrix import load
from provision.model.settings import InstallSettings, PipSettings
from tests.hosts import harness
from tests.hosts import standalone_python as standin
from tests.integration import roles_harness as rh

pytestmark = [pytest.mark.slow, pytest.mark.network]  # uv's wheel comes from PyPI

TORCH_CPU = "torch==2.13.0+cpu"
MIRROR = "/srv/python-mirror"  # where the host sees the stand-in mirror (file:// URLs)
VENV = "/opt/provision/venv"
SHOW = f"{VENV}/bin/python -c 'import sys, torch; print(sys.base_prefix, sys.version.split()[0], torch.__version__)'"


@pytest.fixture(scope="module")
def mirror(testhosts: harness.HostSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    sp = load().t.standalone_python
    assert sp is not None
    work = standin.build_mirror(tmp_path_factory.mktemp("python-mirror"), MIRROR, sp.uv)
    host = testhosts.hosts[-1]
    tar = subprocess.Popen(["tar", "-C", str(work), "-cf", "-", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["ssh", "-F", str(testhosts.ssh_config), host.name, f"mkdir -p {MIRROR} && tar -C {MIRROR} -xf -"],
        stdin=tar.stdout,
        check=True,
        timeout=600,
    )
    assert tar.wait() == 0
    yield {"host": host, "uv": sp.uv}
    rh.unprovision(testhosts, [host])
    rh.ssh(testhosts, host, f"rm -rf {MIRROR} /opt/provision; {rh.PURGE_PYTHON_ENV_PACKAGES}")


def _run(
    run: Path, testhosts: harness.HostSet, host: harness.TestHost, wheelhouse: Path, *, source: str, listing: str
) -> rh.Outcome:
    group = rh.lock_group(
        "py", [host.name], os="debian-12", frameworks=[TORCH_CPU], python="3.11", python_source=source
    )
    assert group["stack"]["python_source"] == source, group["stack"]
    install = InstallSettings(
        venv=VENV,
        pip=PipSettings(find_links=(str(wheelhouse),)),
        python_downloads_json=f"file://{MIRROR}/{listing}",
    )
    # the hosts reach no index: torch from the wheelhouse, uv's wheel from the mirror
    overrides = {"frameworks_no_index": True, "python_env_pip_args": ["--no-index", f"--find-links={MIRROR}"]}
    return rh.apply(rh.render(run, testhosts, host, group, install=install, overrides=overrides), host.name)


def test_a_standalone_cpython_from_a_mirror_builds_the_venv_and_converges(
    mirror: dict[str, Any], testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    host = mirror["host"]
    rh.unprovision(testhosts, [host])

    refused = _run(tmp_path / "bad", testhosts, host, wheelhouse, source="standalone", listing="bad.json")
    assert refused.rc != 0, refused.output[-3000:]
    assert "hash mismatch" in refused.output.lower() or "sha256" in refused.output.lower(), refused.output[-3000:]
    left = rh.ssh(testhosts, host, f"ls /opt/provision/python 2>/dev/null; ls {VENV} 2>&1", check=False)
    assert f"cpython-{standin.version()}" not in left and "No such file" in left, left

    first = _run(tmp_path / "run1", testhosts, host, wheelhouse, source="standalone", listing="downloads.json")
    assert first.rc == 0 and first.changed > 0, first.output[-3000:]
    assert f"uv {mirror['uv']}" in rh.ssh(testhosts, host, "/opt/provision/uv/bin/uv --version")
    prefix, version, torch = rh.ssh(testhosts, host, SHOW).split()
    # uv's minor-version link to the install (it follows a patch upgrade); the version is the stand-in's
    assert prefix.startswith(f"/opt/provision/python/cpython-{standin.minor()}-linux-"), prefix
    assert (version, torch) == (standin.version(), "2.13.0+cpu")

    second = _run(tmp_path / "run2", testhosts, host, wheelhouse, source="standalone", listing="downloads.json")
    assert second.rc == 0 and second.changed == 0, second.output[-3000:]

    back = _run(tmp_path / "run3", testhosts, host, wheelhouse, source="os", listing="downloads.json")
    assert back.rc == 0 and back.changed > 0, back.output[-3000:]
    prefix, version, torch = rh.ssh(testhosts, host, SHOW).split()
    assert prefix == "/usr" and torch == "2.13.0+cpu", (prefix, version, torch)
