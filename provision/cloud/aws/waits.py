"""Waiting on EC2 and on the hosts: running, status checks, SSH banner, console host keys, terminated."""

from __future__ import annotations

import socket
import time
from typing import Any

from provision.cloud.aws import errors as cerr
from provision.cloud.aws.session import Ec2Session
from provision.cloud.errors import CloudError
from provision.cloud.inventory import Host, host_keys_from_console


class Waits(Ec2Session):
    """The polls of a launch and a teardown, each bounded by a timeout and said when it runs out."""

    def _wait_running(self, ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found = self._describe(ids)
            except Exception as exc:
                c = cerr.classify(exc)
                # Just after RunInstances the ids may not be visible yet (eventual consistency).
                if c is None or c.code != "InvalidInstanceID.NotFound":
                    raise
                found = []
            states = {i["InstanceId"]: i["State"]["Name"] for i in found}
            gone = [i for i, s in states.items() if s in ("shutting-down", "terminated", "stopping", "stopped")]
            if gone:
                reason = next(
                    (i.get("StateReason", {}).get("Message", "") for i in found if i["InstanceId"] in gone),
                    "",
                )
                raise CloudError(f"{', '.join(gone)} stopped before running ({reason})", "try again or another zone")
            if len(states) == len(ids) and all(s == "running" for s in states.values()):
                return found
            if time.monotonic() > deadline:
                raise CloudError(f"instances not running after {timeout_s:.0f}s: {states}", "check the EC2 console")
            self.sleep(self.poll_s)

    def _wait_status_ok(self, ids: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.call(self.client.describe_instance_status, InstanceIds=ids, IncludeAllInstances=True)
            checks = {
                s["InstanceId"]: (
                    s.get("InstanceStatus", {}).get("Status"),
                    s.get("SystemStatus", {}).get("Status"),
                )
                for s in st.get("InstanceStatuses", [])
            }
            bad = [i for i, c in checks.items() if "impaired" in c]
            if bad:
                raise CloudError(
                    f"status checks failed on {', '.join(bad)}",
                    "the hardware or image is faulty; launch again",
                )
            if len(checks) == len(ids) and all(c == ("ok", "ok") for c in checks.values()):
                return
            if time.monotonic() > deadline:
                raise CloudError(f"status checks not passed after {timeout_s:.0f}s: {checks}", "check the EC2 console")
            self.sleep(self.poll_s)

    def _wait_ssh(self, hosts: list[Host], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(hosts)
        while waiting:
            waiting = [h for h in waiting if not ssh_answers(h.address, h.port)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise CloudError(
                    f"SSH not answering on {', '.join(f'{h.address}:{h.port}' for h in waiting)}"
                    f" after {timeout_s:.0f}s",
                    "check that --ssh-cidr covers this machine's address; or use --no-wait-ssh",
                )
            self.sleep(self.poll_s)

    def _with_host_keys(self, hosts: list[Host], patient: bool) -> list[Host]:
        """Host keys from each console; cloud-init's output can lag SSH by a minute, so retry."""
        out = []
        for h in hosts:
            keys: list[tuple[str, str]] = []
            for _ in range(12 if patient else 1):
                text = self.call(self.client.get_console_output, InstanceId=h.name, Latest=True).get("Output") or ""
                keys = host_keys_from_console(text)
                if keys or not patient:
                    break
                self.sleep(self.poll_s)
            out.append(Host(h.name, h.address, h.port, h.user, h.instance_type, h.zone, tuple(keys)))
        return out

    def _wait_terminated(self, ids: list[str], timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = {i["InstanceId"]: i["State"]["Name"] for i in self._describe(ids)}
            if all(s == "terminated" for s in states.values()):
                return
            self.sleep(self.poll_s)
        raise CloudError(f"instances not terminated after {timeout_s:.0f}s", "check the EC2 console")


def ssh_answers(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """True when something at host:port speaks SSH (sends the ``SSH-`` banner)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False
