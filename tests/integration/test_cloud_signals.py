"""SIGTERM, SIGHUP and Ctrl-C sent to a real `provision cloud up` / `up --cloud` process mid-launch.

The process is the installed `provision` entry point, run against the moto server through
:class:`HoldingProxy` (a test-only proxy in front of moto): moto carries out RunInstances, so
the instances exist and carry the run's tags, but the proxy holds the answer, so the process
is inside RunInstances, without the instance ids, when the signal arrives. It must
leave nothing on moto: the instances it never got the ids of are found by their run tag. It must
exit 128 + the signal's number (the shell's convention: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cloud_fixtures import Aws, HoldingProxy, aws, moto_url, nothing_left

__all__ = ["aws", "moto_url"]

PROVISION = str(Path(sys.executable).with_name("provision"))
# `provision` as a terminal starts its foreground job: SIGINT at its default. A test session
# started in the background by a non-interactive shell (`make test &`, nohup) has SIGINT ignored,
# every child inherits that across exec, and Python then installs no KeyboardInterrupt: the SIGINT
# case waited out its 120 s. Reproduced: under `trap '' INT` it fails every time, without it it
# passes (this was the "SIGINT hang in loaded sessions": those sessions were started that way).
AS_FOREGROUND = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
]
LAUNCH = [
    "--instance-type",
    "g5.xlarge",
    "--count",
    "2",
    "--ssh-cidr",
    "203.0.113.7/32",
    "--os",
    "ubuntu-22.04",
    "--new-key",
    "--json",
]


@pytest.fixture
def proxy(aws: Aws) -> Iterator[HoldingProxy]:
    p = HoldingProxy(aws.url, "RunInstances")
    yield p
    p.close()


def interrupted(aws: Aws, proxy: HoldingProxy, args: list[str], sig: signal.Signals) -> tuple[int, str, str]:
    """Start ``provision ARGS``, send ``sig`` while its RunInstances is held; (exit code, stdout, stderr)."""
    env = dict(os.environ, AWS_ENDPOINT_URL=proxy.url, AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.Popen(
        [*AS_FOREGROUND, PROVISION, *args],
        cwd=aws.workdir,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proxy.held.wait(60), "the launch never reached RunInstances"
        assert len(aws.live()) == 2  # moto made them; the process has not heard back
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proxy.release()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_cloud_up_interrupted_during_run_instances_removes_the_run(
    aws: Aws, proxy: HoldingProxy, sig: signal.Signals
) -> None:
    code, out, err = interrupted(aws, proxy, ["cloud", "up", *LAUNCH, "--ami", aws.ami(), "--yes"], sig)
    assert code == 128 + sig, err[-3000:]  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
    assert json.loads(out)["error"]["code"] == "interrupted"
    assert "found by the run tag" in err and "Traceback" not in err
    assert nothing_left(aws), err[-3000:]
    assert list(aws.workdir.glob(".provision/runs/*/id_ed25519")) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_up_cloud_interrupted_during_run_instances_removes_the_run(
    aws: Aws, proxy: HoldingProxy, sig: signal.Signals
) -> None:
    code, out, err = interrupted(
        aws, proxy, ["up", "--cloud", *LAUNCH, "--ami", aws.ami(), "--yes", "--down-after"], sig
    )
    assert code == 128 + sig, err[-3000:]  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
    assert json.loads(out)["error"]["code"] == "interrupted"
    assert "found by the run tag" in err and "Traceback" not in err
    assert nothing_left(aws), err[-3000:]
    assert list(aws.workdir.glob(".provision/runs/*/id_ed25519")) == []


def test_a_second_sigterm_does_not_cut_the_cleanup_short(aws: Aws) -> None:
    """CI runners and systemd repeat SIGTERM: the one during the cleanup is said and ignored."""
    terminating = HoldingProxy(aws.url, "TerminateInstances")  # holds the cleanup's first call
    env = dict(os.environ, AWS_ENDPOINT_URL=terminating.url, AWS_EC2_METADATA_DISABLED="true")
    try:
        proc = subprocess.Popen(
            [*AS_FOREGROUND, PROVISION, "cloud", "up", *LAUNCH, "--ami", aws.ami(), "--yes"],
            cwd=aws.workdir,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # No RunInstances hold here: the first SIGTERM comes once moto has the instances.
            start = time.monotonic()
            while len(aws.live()) < 2 and time.monotonic() - start < 60:
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert terminating.held.wait(60), "the cleanup never reached TerminateInstances"
            proc.send_signal(signal.SIGTERM)
            terminating.release()
            _, err = proc.communicate(timeout=120)
        finally:
            terminating.release()
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        terminating.close()
    assert proc.returncode == 143, err[-3000:]
    assert "SIGTERM again: still removing" in err
    assert nothing_left(aws), err[-3000:]
