"""SSHTransport.run reads a command's output up to the channel's EOF, not up to its exit status.

OpenSSH's sshd sends exit-status when the command exits, while its output may still wait in the
pipe (session.c, session_exit_message: "there could be some more data waiting in the pipe"). On a
loaded machine that tore a report `cat` printed (a verify failed with "a report that is not JSON").
The server here is paramiko's server side on loopback, sending the status first on purpose, so the
order that happens now and then under load happens every time.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import paramiko
import pytest

from provision.hosts.ssh import SSHTransport
from provision.hosts.ssh_config import SSHSettings
from provision.hosts.transport import CommandTimeout

pytestmark = pytest.mark.unit

REPORT = b'{"ok": true, "checks": []}\n' * 400  # bigger than one channel packet


class StatusFirst(paramiko.ServerInterface):
    """Accepts one password login and answers every command: exit status, then (later) output and EOF."""

    def __init__(self, delay: float, finish: bool = True) -> None:
        self.delay, self.finish = delay, finish

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_auth_password(self, username: str, password: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        threading.Thread(target=self._answer, args=(channel,), daemon=True).start()
        return True

    def _answer(self, channel: paramiko.Channel) -> None:
        channel.send_exit_status(3)
        time.sleep(self.delay)
        channel.sendall(REPORT)
        channel.sendall_stderr(b"a warning\n")
        if self.finish:
            channel.shutdown_write()  # EOF
            channel.close()


@contextmanager
def transport_to(server: paramiko.ServerInterface) -> Iterator[SSHTransport]:
    host_key = paramiko.RSAKey.generate(1024)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    serving: list[paramiko.Transport] = []

    def serve() -> None:
        conn, _ = listener.accept()
        side = paramiko.Transport(conn)
        side.add_server_key(host_key)
        side.start_server(server=server)
        serving.append(side)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = paramiko.SSHClient()
    # the server's own key, known up front: host keys stay verified in tests too
    client.get_host_keys().add(f"[127.0.0.1]:{port}", host_key.get_name(), host_key)
    client.connect("127.0.0.1", port=port, username="u", password="p", look_for_keys=False, allow_agent=False)
    try:
        yield SSHTransport(SSHSettings(name="statusfirst", hostname="127.0.0.1", port=port, user="u"), client)
    finally:
        client.close()
        thread.join(timeout=10)
        for side in serving:
            side.close()
        listener.close()


def test_output_that_arrives_after_the_exit_status_is_read_whole() -> None:
    with transport_to(StatusFirst(delay=0.3)) as transport:
        result = transport.run(["cat", "report.json"], timeout=30)
    assert result.exit_status == 3
    assert result.stdout.encode() == REPORT
    assert result.stderr == "a warning\n"


def test_a_channel_that_never_ends_its_output_times_out() -> None:
    with transport_to(StatusFirst(delay=0.0, finish=False)) as transport, pytest.raises(CommandTimeout):
        transport.run("sleep infinity", timeout=1.5)
