"""Shared test harness: markers by folder, the session's SSH test hosts, GPU detection."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts import harness

REPO = Path(__file__).resolve().parent.parent
# In CI (and `make test`) missing prerequisites for integration tests are failures, not skips:
# a green run must mean the real parts ran.
REQUIRE_TESTHOSTS = os.environ.get("PROVISION_REQUIRE_TESTHOSTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        folder = parts[0] if len(parts) > 1 else ""
        if folder in ("unit", "integration", "gpu"):
            item.add_marker(getattr(pytest.mark, folder))
        if item.get_closest_marker("gpu") and not has_gpu():
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU on this machine"))


# What the test hosts looked like when a test that used them failed: CI shows the tail of the
# output, so the terminal summary repeats it there (a login refused by PAM, a host still booting).
_HOST_REPORTS: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    hostset = getattr(item, "funcargs", {}).get("testhosts")
    if report.failed and call.when == "call" and isinstance(hostset, harness.HostSet):
        text = harness.describe(hostset)
        report.sections.append(("test hosts", text))
        _HOST_REPORTS.append(f"{item.nodeid}\n{text}")
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _HOST_REPORTS:
        terminalreporter.section("test hosts when tests failed")
        for text in _HOST_REPORTS[-5:]:
            terminalreporter.line(text)


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def require_testhost_support() -> None:
    """Skip where test hosts cannot run; fail instead under `make test` / CI."""
    why = harness.available()
    if why:
        if REQUIRE_TESTHOSTS:
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """A local wheel directory with the CPU torch stack (see harness.fill_wheelhouse).

    Bind-mounted read-only into every test host at the same path, so playbooks and tests
    install ``torch==<TORCH_CPU_VERSION>+cpu`` there with ``--no-index --find-links``.
    """
    return harness.fill_wheelhouse()


@pytest.fixture(scope="session")
def testhosts(wheelhouse: Path) -> Iterator[harness.HostSet]:
    """N Debian 12 hosts reachable by real SSH with verified host keys (N: PROVISION_TESTHOSTS, 4).

    Brought up once per session over a cached base rootfs; torn down at the end even when
    tests fail (pytest runs the finalizer), and `up` first removes what a killed run left.
    TESTHOSTS_DIR / _PREFIX / _NET / _BRIDGE let two checkouts run their sets side by side.
    """
    require_testhost_support()
    count = int(os.environ.get("PROVISION_TESTHOSTS", "4"))
    with harness.running(
        count,
        Path(os.environ.get("TESTHOSTS_DIR", "/var/tmp/provision-testhosts")),
        prefix=os.environ.get("TESTHOSTS_PREFIX", "th"),
        net=os.environ.get("TESTHOSTS_NET", "10.200.0"),
        bridge=os.environ.get("TESTHOSTS_BRIDGE", "thbr0"),
        ro_binds=[wheelhouse],
    ) as hostset:
        yield hostset


@pytest.fixture
def descriptors_above_1024() -> Iterator[None]:
    """Hold 1200 descriptors open, so the next ones this process opens are numbered above 1024
    (FD_SETSIZE: what select.select cannot watch, and what a fleet of 500+ hosts reaches)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1200
    if hard != resource.RLIM_INFINITY and hard < want + 64:
        pytest.fail(f"the hard descriptor limit {hard} is below {want + 64}: raise it (ulimit -Hn) to run this test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want + 64), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(want)]
    try:
        assert max(held) > 1024
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
