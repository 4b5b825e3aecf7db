"""Shared test harness: markers by folder, the session's SSH test hosts, GPU detection."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
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


# Each module's time where CI shows it: a run stopped at CI's limit prints no --durations table, so
# a module's dots end with its seconds and the session's ("... [12 s, 840 s in]").
_STARTED = {"session": time.monotonic(), "module": time.monotonic(), "wall": time.time()}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    result = yield
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and (nextitem is None or nextitem.path != item.path):
        now = time.monotonic()
        reporter.write(f" [{now - _STARTED['module']:.0f} s, {now - _STARTED['session']:.0f} s in]")
        _STARTED["module"] = now
    return result


# Under xdist (the unit run, --dist loadscope) the workers' terminals are not shown: the controller
# says when a worker moved on from a module that took 10 s or more, and how long it took from its
# first test's start to its last one's end.
_WORKER_MODULE: dict[str, tuple[str, float, float]] = {}  # worker -> (module, first start, last stop)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set by xdist's controller on each worker's report
    if node is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    worker = str(node.gateway.id)
    module = report.nodeid.split("::")[0]
    held = _WORKER_MODULE.get(worker)
    if held is not None and held[0] != module:
        _say_module_done(node.config, worker, held)
        held = None
    _WORKER_MODULE[worker] = (module, held[1] if held else report.start, report.stop)


def _say_module_done(config: pytest.Config, worker: str, held: tuple[str, float, float]) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    module, start, stop = held
    if reporter is not None and stop - start >= 10:
        in_run = stop - (_STARTED["wall"])
        reporter.write_line(f"{module} [{stop - start:.0f} s on {worker}, {in_run:.0f} s in]")


def pytest_sessionfinish(session: pytest.Session) -> None:
    for worker, held in sorted(_WORKER_MODULE.items()):
        _say_module_done(session.config, worker, held)
    _WORKER_MODULE.clear()


# `up --local`, `verify --local` and `tune --local` take this machine's run lock
# (provision/hosts/runlock.py, /run/provision.lock) and wait for an earlier apply's processes, as
# two runs of provision on one host must. Two xdist workers running such tests at once would make
# one of them fail "busy" (or wait), so those tests hold this lock first: one at a time across
# workers, as one user at a time on one machine. Modules opt in with
# `pytestmark = pytest.mark.usefixtures("this_machine")`.
THIS_MACHINE_LOCK = Path(tempfile.gettempdir()) / f"provision-tests-this-machine-{os.getuid()}.lock"


@pytest.fixture
def this_machine() -> Iterator[None]:
    with THIS_MACHINE_LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


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
    settings = harness.session_settings()
    # the Debian 13 base builds meanwhile (minutes on a fresh machine); testhosts_debian13 waits for it
    _BASE_BUILDS.append(harness.start_base_build(harness.debian13_settings(settings)))
    try:
        with harness.running(count, ro_binds=[wheelhouse], **settings) as hostset:
            yield hostset
    finally:
        for build in filter(None, _BASE_BUILDS):
            build.wait()


_BASE_BUILDS: list[subprocess.Popen[bytes] | None] = []


@pytest.fixture(scope="session")
def testhosts_debian13() -> Iterator[harness.HostSet]:
    """One Debian 13 (trixie) host beside the Debian 12 set, reachable the same way.

    Its own base rootfs (debootstrap trixie from Debian's mirror, built on first use and cached
    at TESTHOSTS_BASE_TRIXIE), and a directory, prefix, bridge and /24 derived from the Debian 12
    set's (harness.debian13_settings), so the two sets of one checkout, and of two, never meet.
    No wheelhouse: its wheels are for Debian 12's Python 3.11 (Debian 13 runs 3.13).
    """
    require_testhost_support()
    settings = harness.debian13_settings(harness.session_settings())
    for build in filter(None, _BASE_BUILDS):
        if build.wait() != 0:  # e.g. Debian's mirror out of reach
            why = f"the Debian 13 base rootfs did not build: see {settings['directory']}/debootstrap.log"
            pytest.fail(why) if REQUIRE_TESTHOSTS else pytest.skip(why)
    with harness.running(1, **settings) as hostset:
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
