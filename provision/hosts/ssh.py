"""SSH (paramiko) as a :class:`~provision.hosts.transport.Transport`, and :func:`connect`.

:func:`connect` opens a transport to a target: a :class:`~provision.hosts.local.LocalTransport`
for local targets, else an :class:`SSHTransport` with the settings of
:mod:`provision.hosts.ssh_config`, ssh-agent, ProxyJump chains and ProxyCommand, and host keys
checked against known_hosts (:mod:`provision.hosts.known_hosts`). Network, authentication and
host key failures are :class:`~provision.errors.Unreachable` with a one-line message naming the host.
"""

from __future__ import annotations

import itertools
import logging
import shlex
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput, Unreachable
from provision.hosts.inventory import LOCALHOST, HostTarget, parse_host

if TYPE_CHECKING:
    import paramiko
import selectors

from provision.hosts.known_hosts import (
    RevokedHostKey,
    UnknownHostKey,
    fingerprint,
    host_key_name,
    load_known_hosts,
    record_host_key,
)
from provision.hosts.local import LocalTransport
from provision.hosts.ssh_config import SSHSettings, resolve_settings
from provision.hosts.transport import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    CommandResult,
    CommandTimeout,
    Spawned,
    Transport,
    paramiko_errors,
    shell_text,
    sudo_stdin,
    sudo_wrap,
)

# paramiko logs a failed connection's traceback from its own thread; without a handler Python's
# last-resort handler would print it to stderr, breaking the one-line error. The error itself
# reaches the user as Unreachable.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SSHTransport:
    """A paramiko connection to one host, opened by :func:`connect`."""

    def __init__(
        self, settings: SSHSettings, client: paramiko.SSHClient, jumps: Sequence[paramiko.SSHClient] = ()
    ) -> None:
        self.settings = settings
        self._client = client
        self._jumps = list(jumps)

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def user(self) -> str:
        return self.settings.user

    @property
    def client(self) -> paramiko.SSHClient:
        """The open paramiko client (the fleet cache forwards ports over it)."""
        return self._client

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        sudo: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        text, stdin, transport = self._prepare(command, sudo, stdin)
        try:
            return self._run(transport, text, timeout, stdin)
        except (OSError, EOFError, paramiko_errors()) as exc:  # the connection broke under us
            reason = str(exc) or type(exc).__name__
            raise Unreachable(
                f"connection to {self.name} failed during a command: {reason}",
                "check the host and the network, then try again",
            ) from None

    def _prepare(
        self, command: str | Sequence[str], sudo: bool, stdin: bytes | None
    ) -> tuple[str, bytes | None, paramiko.Transport]:
        """The shell text (sudo-wrapped for a non-root login), its stdin, and the live transport."""
        text = shell_text(command)
        if sudo and self.settings.user != "root":
            text = sudo_wrap(text, self.settings.sudo_password)
            stdin = sudo_stdin(self.settings.sudo_password, stdin)
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise Unreachable(f"connection to {self.name} was lost", "check the host and try again")
        return text, stdin, transport

    def _run(self, transport: paramiko.Transport, text: str, timeout: float, stdin: bytes | None) -> CommandResult:
        deadline = time.monotonic() + timeout
        chan = transport.open_session(timeout=timeout)
        # A selector (epoll/poll), not select.select: select() cannot watch a descriptor numbered
        # 1024 or above (FD_SETSIZE) and raises ValueError, which a fleet of 500+ hosts (two
        # descriptors per connection, plus files) reaches. paramiko's Channel has a fileno() for this.
        waiter = selectors.DefaultSelector()
        waiter.register(chan, selectors.EVENT_READ)
        try:
            chan.exec_command(text)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                    got = True
                # The output ends at the channel's EOF, not at the exit status: OpenSSH's sshd sends
                # exit-status as soon as the command exits, while output may still wait in the pipe
                # (session.c, session_exit_message: "there could be some more data waiting in the
                # pipe"); stopping at the status tore a report `cat` printed on a loaded machine.
                done = chan.eof_received or chan.closed
                if done and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                left = self._left(deadline, timeout)
                if not got:
                    waiter.select(min(left, 0.5))
            # the status may follow the EOF (the channel closes after both)
            if not chan.status_event.wait(self._left(deadline, timeout)):
                raise self._timed_out(timeout)
            return CommandResult(chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace"))
        finally:
            waiter.close()
            chan.close()

    def _left(self, deadline: float, timeout: float) -> float:
        """Seconds left before ``deadline``; CommandTimeout when there are none."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._timed_out(timeout)
        return left

    def _timed_out(self, timeout: float) -> CommandTimeout:
        return CommandTimeout(
            f"command timed out after {timeout:g}s on {self.name}",
            "raise the timeout or check what the command waits for",
        )

    def spawn(self, command: str | Sequence[str], *, sudo: bool = False, stdin: bytes | None = None) -> Spawned:
        """Start a command that keeps running over its own channel; see :class:`Spawned`."""
        text, stdin, transport = self._prepare(command, sudo, stdin)
        try:
            chan = transport.open_session(timeout=DEFAULT_CONNECT_TIMEOUT)
            chan.exec_command(f"exec 2>&1; {text}")
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise Unreachable(
                f"connection to {self.name} failed: {exc or type(exc).__name__}",
                "check the host and the network, then try again",
            ) from None
        spawned = Spawned(
            self.name,
            chan,
            read=lambda: chan.recv(1 << 16),
            write=chan.sendall,
            running=lambda: not (chan.closed or chan.exit_status_ready()),
            close=chan.close,
        )
        if stdin:
            spawned.write(stdin)
        return spawned

    def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        with self._client.open_sftp() as sftp:
            sftp.put(str(local), remote)
            sftp.chmod(remote, mode)

    def get(self, remote: str, local: Path) -> None:
        with self._client.open_sftp() as sftp:
            sftp.get(remote, str(local))

    def close(self) -> None:
        self._client.close()
        for jump in reversed(self._jumps):
            jump.close()


def _open_client(
    settings: SSHSettings,
    *,
    accept_new_host_keys: bool,
    connect_timeout: float,
    sock: Any = None,
) -> paramiko.SSHClient:
    import paramiko  # noqa: PLC0415 (paramiko is heavy: only an SSH connection loads it)

    client = paramiko.SSHClient()
    name = host_key_name(settings.hostname, settings.port)
    revoked = load_known_hosts(client, settings.known_hosts_files, name)

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            # a revoked key was left out of the known ones, so it lands here: refused, recorded never
            if key.asbytes() in revoked:
                raise RevokedHostKey(key)
            if not accept_new_host_keys:
                raise UnknownHostKey(key)
            record_host_key(settings.known_hosts_files[0], settings.hostname, settings.port, key)

    client.set_missing_host_key_policy(Policy())
    where = f"{settings.name} ({settings.user}@{settings.hostname}:{settings.port})"
    if sock is None and settings.proxy_command:
        sock = paramiko.ProxyCommand(settings.proxy_command)
    try:
        if sock is None:
            sock = socket.create_connection((settings.hostname, settings.port), timeout=connect_timeout)
            # SSH's small request/answer packets otherwise wait on Nagle + delayed ACK (~40 ms per
            # round trip: channel opens, key exchange); OpenSSH sets this too.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(
            settings.hostname,
            port=settings.port,
            username=settings.user,
            password=settings.password,
            key_filename=list(settings.key_files) or None,  # type: ignore[arg-type]  # paramiko takes a list
            allow_agent=True,
            look_for_keys=not settings.identities_only,
            timeout=connect_timeout,
            banner_timeout=connect_timeout,
            auth_timeout=connect_timeout,
            channel_timeout=connect_timeout,
            sock=sock,
        )
    except UnknownHostKey as exc:
        client.close()
        raise Unreachable(
            f"unknown host key for {settings.name} ({name}): {exc.key.get_name()} {fingerprint(exc.key)}",
            "check the fingerprint with the host's owner, then rerun with --accept-new-host-keys "
            f"to record it in {settings.known_hosts_files[0]}",
            details={"host": settings.name, "fingerprint": fingerprint(exc.key)},
        ) from None
    except (RevokedHostKey, paramiko.BadHostKeyException) as exc:
        client.close()
        if isinstance(exc, RevokedHostKey) or exc.key.asbytes() in revoked:
            raise Unreachable(
                f"host key for {settings.name} ({name}) is REVOKED in known_hosts: the host offers "
                f"{exc.key.get_name()} {fingerprint(exc.key)}, which a @revoked line names",
                "do not connect: ask the host's owner why its key was revoked and which key it has now",
                details={"host": settings.name, "fingerprint": fingerprint(exc.key)},
            ) from None
        raise Unreachable(
            f"host key for {settings.name} ({name}) has CHANGED: the host offers {exc.key.get_name()} "
            f"{fingerprint(exc.key)}, known_hosts has {fingerprint(exc.expected_key)}",
            "if the host was reinstalled, remove the old key with "
            f"`ssh-keygen -R {shlex.quote(name)} -f {settings.known_hosts_files[0]}`; "
            "otherwise do not connect",
            details={"host": settings.name, "fingerprint": fingerprint(exc.key)},
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise Unreachable(
            f"authentication failed for {where}: {exc}",
            "check the user and key (user@HOST, ansible_user, ansible_ssh_private_key_file, "
            "~/.ssh/config IdentityFile) or load the key into ssh-agent",
        ) from None
    except TimeoutError:
        client.close()
        raise Unreachable(
            f"cannot reach {where}: timed out after {connect_timeout:g}s",
            "check the address, the network path and that sshd runs there",
        ) from None
    except socket.gaierror as exc:
        client.close()
        raise Unreachable(
            f"cannot resolve {settings.hostname} for {settings.name}: {exc.strerror}",
            "check the host name or set ansible_host",
        ) from None
    except (OSError, paramiko.SSHException, EOFError) as exc:
        client.close()
        reason = str(exc) or type(exc).__name__
        if "No authentication methods available" in reason:  # no key, agent or password to offer
            raise Unreachable(
                f"authentication failed for {where}: no key, ssh-agent or password to offer",
                "give a key (IdentityFile, ansible_ssh_private_key_file) or load one into ssh-agent",
            ) from None
        raise Unreachable(
            f"cannot reach {where}: {reason}", "check the address, the port and that sshd runs there"
        ) from None
    return client


def _parse_jump(spec: str) -> HostTarget:
    spec = spec.strip()
    if spec.startswith("ssh://"):
        spec = spec[len("ssh://") :]
    return parse_host(spec)


def connect(
    target: HostTarget | str,
    *,
    accept_new_host_keys: bool = False,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ssh_config: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Transport:
    """Open a transport to ``target`` (a :class:`HostTarget` or a ``[user@]name[:port]`` string).

    Local targets (``--local``, ``ansible_connection=local``) get a :class:`LocalTransport`;
    everything else is SSH. Raises :class:`Unreachable` for network, authentication and host
    key failures, with a one-line message that names the host.
    """
    if isinstance(target, str):
        target = LOCALHOST if target == "localhost" else parse_host(target)
    if target.local:
        return LocalTransport(target.name, env=env, sudo_password=target.become_password)
    settings = resolve_settings(target, ssh_config)
    jumps: list[paramiko.SSHClient] = []
    sock: Any = None
    try:
        if settings.proxy_jump:
            # ProxyJump a,b: reach a, tunnel to b through it, then to the target through b.
            chain = [resolve_settings(_parse_jump(hop), ssh_config) for hop in settings.proxy_jump.split(",")]
            chain.append(settings)
            for hop, following in itertools.pairwise(chain):
                client = _open_client(
                    hop, accept_new_host_keys=accept_new_host_keys, connect_timeout=connect_timeout, sock=sock
                )
                jumps.append(client)
                hop_transport = client.get_transport()
                assert hop_transport is not None
                sock = hop_transport.open_channel(
                    "direct-tcpip", (following.hostname, following.port), ("127.0.0.1", 0), timeout=connect_timeout
                )
        client = _open_client(
            settings, accept_new_host_keys=accept_new_host_keys, connect_timeout=connect_timeout, sock=sock
        )
    except Exception as exc:
        for jump in jumps:
            jump.close()
        if isinstance(exc, (Unreachable, BadInput)):  # BadInput: e.g. a known_hosts line
            raise
        raise Unreachable(
            f"cannot reach {settings.name} through {settings.proxy_jump}: {exc}", "check the ProxyJump host"
        ) from None
    return SSHTransport(settings, client, jumps)
