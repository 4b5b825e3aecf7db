"""The reverse port forwards over one SSH connection per host (loopback only on the host), the
bytes they pump, and the host_vars that point a host at its end of them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import selectors
import socket
import struct
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from provision.fleet.cache import one_line

if TYPE_CHECKING:
    import paramiko


def host_vars(
    apt_port: int | None, wheels_port: int | None, wheel_key: str | None, environment: Mapping[str, str]
) -> dict[str, Any]:
    """The role variables that point one host at its end of the tunnels."""
    out: dict[str, Any] = {}
    # The credential files' proxy settings (render.Credentials: APT_CONFIG for apt, PIP_CONFIG_FILE
    # for pip) would send apt and pip past the tunnels, straight to install.apt.proxy; through a
    # tunnel they need no proxy and no proxy login.
    dropped = ({"APT_CONFIG"} if apt_port is not None else set()) | (
        {"PIP_CONFIG_FILE"} if wheels_port is not None and wheel_key is not None else set()
    )
    env = {k: v for k, v in environment.items() if k not in dropped}
    if apt_port is not None:
        env["http_proxy"] = f"http://127.0.0.1:{apt_port}"
    if wheels_port is not None and wheel_key is not None:
        out["frameworks_find_links"] = [f"http://127.0.0.1:{wheels_port}/{wheel_key}/"]
        out["frameworks_no_index"] = True
    if apt_port is not None or "frameworks_find_links" in out:
        # Both ends are on the host's own loopback: never through a proxy the play's environment
        # names (install.apt.proxy cannot reach that loopback; CI saw pip get "from versions: none"
        # on a host whose apt sources squid does not serve). A site's own no_proxy entries stay.
        kept = [h for h in str(env.get("no_proxy") or "").split(",") if h.strip()]
        env["no_proxy"] = ",".join([*kept, *(h for h in ("127.0.0.1", "localhost") if h not in kept)])
    if env != dict(environment):
        out["provision_environment"] = env
    return out


class Tunnel:
    """Reverse port forwards over one SSH connection: the host's 127.0.0.1:P -> a controller port."""

    def __init__(self, client: paramiko.SSHClient, name: str) -> None:
        self.client = client
        self.name = name
        self.ports: dict[int, int] = {}  # remote port -> local port
        transport = client.get_transport()
        if transport is not None:  # a driver build can leave the tunnel idle for minutes: keep NATs open
            transport.set_keepalive(30)

    def forward(self, local_port: int) -> int:
        """Forward the host's 127.0.0.1:P (P: the port sshd picks) to ``local_port``; returns P.

        We ask for the loopback address, which binds it there under sshd's default
        (``GatewayPorts no``: "sshd binds remote port forwardings to the loopback address",
        sshd_config(5)). ``GatewayPorts yes`` ignores the address asked for and binds the
        wildcard, which would put squid and the wheelhouse on the host's network: the host's own
        list of listening sockets decides, and a port bound anywhere else is no tunnel."""
        transport = self.client.get_transport()
        assert transport is not None
        remote = int(transport.request_port_forward("127.0.0.1", 0, handler=self._handler))
        self.ports[remote] = local_port
        try:
            exposed = [a for a in self._listening(remote) if not _is_loopback(a)]
        except Exception as exc:  # unverified is not loopback-only: no tunnel (auto says why)
            exposed = [f"unknown: cannot read the host's sockets ({one_line(exc)})"]
        if exposed:
            with contextlib.suppress(Exception):
                transport.cancel_port_forward("127.0.0.1", remote)
            raise RuntimeError(
                f"the forwarded port {remote} listens on {', '.join(exposed)}, not only on loopback "
                "(GatewayPorts yes in the host's sshd_config?)"
            )
        return remote

    def _listening(self, port: int) -> list[str]:
        """The addresses the host listens on ``port`` at, from its kernel's socket tables."""
        _stdin, stdout, _stderr = self.client.exec_command("cat /proc/net/tcp /proc/net/tcp6", timeout=30)
        return listening_addresses(stdout.read().decode(errors="replace"), port)

    def _handler(self, channel: paramiko.Channel, origin: tuple[str, int], server: tuple[str, int]) -> None:
        local = self.ports.get(server[1])
        if local is None:
            channel.close()
            return
        threading.Thread(target=_pump, args=(channel, local), name=f"tunnel-{self.name}", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def listening_addresses(proc_net_tcp: str, port: int) -> list[str]:
    """Addresses in LISTEN state on ``port`` in Linux's /proc/net/tcp{,6} text (proc(5): local
    address as hex, IPv4 as one little-endian word, IPv6 as four; state 0A is TCP_LISTEN)."""

    out = []
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != "0A" or ":" not in fields[1]:
            continue
        addr_hex, port_hex = fields[1].rsplit(":", 1)
        if int(port_hex, 16) != port:
            continue
        raw = bytes.fromhex(addr_hex)
        words = struct.unpack(f"<{len(raw) // 4}I", raw)  # the kernel prints each 32-bit word in host order
        packed = struct.pack(f">{len(words)}I", *words)
        out.append(str(ipaddress.ip_address(packed if len(packed) == 16 else socket.inet_ntoa(packed))))
    return out


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def _pump(channel: paramiko.Channel, local_port: int) -> None:
    try:
        sock = socket.create_connection(("127.0.0.1", local_port), timeout=10)
    except OSError:
        channel.close()
        return
    # A selector (epoll/poll), not select.select: a fleet's connections and tunnels take the
    # controller's descriptors past 1024, which select() cannot watch. A paramiko Channel has
    # fileno(), so it registers like the socket.
    waiter = selectors.DefaultSelector()
    waiter.register(sock, selectors.EVENT_READ, "sock")
    waiter.register(channel, selectors.EVENT_READ, "channel")
    try:
        while True:
            ready = {key.data for key, _ in waiter.select(60)}
            if "sock" in ready:
                data = sock.recv(1 << 16)
                if not data:
                    break
                channel.sendall(data)
            if "channel" in ready:
                data = channel.recv(1 << 16)
                if not data:
                    break
                sock.sendall(data)
    except OSError:
        pass
    finally:
        waiter.close()
        sock.close()
        channel.close()
