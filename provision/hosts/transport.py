"""How the drivers reach a host: the local machine (subprocess) or SSH (paramiko).

Everything that runs a command on a host or copies a file to it goes through :class:`Transport`,
so probe, verify and status work the same against the local machine and a fleet.

SSH follows OpenSSH's rules where users rely on them: ``~/.ssh/config`` (User, Port,
IdentityFile, IdentitiesOnly, UserKnownHostsFile, ProxyJump, ProxyCommand), ssh-agent, and
explicit values (``user@``, ``:port``, inventory vars, ``-o`` options in
``ansible_ssh_common_args``) winning over the config file. Host keys are always verified against
known_hosts: an unknown key is refused unless the caller accepts new keys (then it is recorded,
like ``StrictHostKeyChecking=accept-new``) and a changed key is refused, always.

paramiko is imported inside the functions that use it: ``provision resolve`` and ``--help`` import
this module's types without paying for it.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import itertools
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from provision.errors import BadInput, OperationFailed, Unreachable
from provision.hosts.inventory import LOCALHOST, HostTarget, parse_host

if TYPE_CHECKING:
    import paramiko

# paramiko logs a failed connection's traceback from its own thread; without a handler Python's
# last-resort handler would print it to stderr, breaking the one-line error. The error itself
# reaches the user as Unreachable.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class CommandResult:
    """What a command left behind: exit status and its decoded output."""

    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class Transport(Protocol):
    """A connection to one host. Implementations: local (subprocess) and SSH (paramiko)."""

    @property
    def name(self) -> str:
        """The host's label as the user named it (inventory name, HOST argument, 'localhost')."""
        ...

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = 60.0,
        sudo: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run a command (a shell string, or an argv that is quoted for the remote shell)."""
        ...

    def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        """Copy a local file to ``remote`` on the host."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy ``remote`` from the host to a local file."""
        ...

    def close(self) -> None: ...


def paramiko_errors() -> type[Exception]:
    import paramiko

    return paramiko.SSHException


class CommandTimeout(OperationFailed):
    """A command ran past its timeout and was stopped."""

    code = "timeout"


def _shell(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def _sudo_wrap(command: str, password: str | None) -> str:
    # -n: never prompt (a prompt would hang until the timeout); -S with a password reads it
    # from stdin, so it never appears on a command line, in `ps` or in a log. -p '' keeps the
    # prompt text out of stderr.
    flags = "-S -p ''" if password is not None else "-n"
    return f"sudo {flags} -- sh -c {shlex.quote(command)}"


def _sudo_stdin(password: str | None, stdin: bytes | None) -> bytes | None:
    if password is None:
        return stdin
    return password.encode() + b"\n" + (stdin or b"")


class Spawned:
    """A long-lived command on a host (see ``spawn``): lines from its stdout (its stderr, sudo's
    included, is merged in, so a failure to start reads as a line), bytes to its stdin.

    Closing it closes the command's stdin and the channel: the command reads end of file, which
    is also what it reads when the controller dies (the kernel closes the pipe or the TCP
    connection of a killed process).
    """

    def __init__(self, host: str, fileno: Any, *, read: Any, write: Any, running: Any, close: Any) -> None:
        import selectors

        self.host = host
        self._read, self._write, self._running, self._close = read, write, running, close
        self._buf = bytearray()
        self._waiter = selectors.DefaultSelector()  # poll/epoll: no FD_SETSIZE limit (see SSHTransport._run)
        self._waiter.register(fileno, selectors.EVENT_READ)

    def readline(self, timeout: float) -> str:
        """The next line of its stdout (without the newline); '' when it ended without one."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommandTimeout(
                    f"no answer from {self.host} after {timeout:g}s", "check the host and what the command waits for"
                )
            if not self._waiter.select(min(left, 0.5)):
                continue
            chunk = self._read()
            if not chunk:
                break
            self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line.decode(errors="replace")

    def write(self, data: bytes) -> bool:
        """Send to its stdin; False when it or the connection is gone."""
        try:
            self._write(data)
        except (OSError, EOFError, ValueError, paramiko_errors()):
            return False
        return True

    def running(self) -> bool:
        return bool(self._running())

    def close(self) -> None:
        self._waiter.close()
        with contextlib.suppress(Exception):
            self._close()


# ---------------------------------------------------------------------------------------------
# Local


class LocalTransport:
    """The machine provision runs on, through subprocess."""

    def __init__(
        self, name: str = "localhost", env: Mapping[str, str] | None = None, sudo_password: str | None = None
    ) -> None:
        self._name = name
        self._env = dict(env) if env is not None else None
        self._sudo_password = sudo_password

    @property
    def name(self) -> str:
        return self._name

    def run(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        sudo: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        text = _shell(command)
        if sudo and os.geteuid() != 0:
            text = _sudo_wrap(text, self._sudo_password)
            stdin = _sudo_stdin(self._sudo_password, stdin)
        # A new session, so that a timeout stops the whole pipeline, not only the shell.
        proc = subprocess.Popen(
            ["/bin/sh", "-c", text],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(
                f"command timed out after {timeout:g}s on {self._name}",
                "raise the timeout or check what the command waits for",
            ) from None
        return CommandResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    def spawn(self, command: str | Sequence[str], *, sudo: bool = False, stdin: bytes | None = None) -> Spawned:
        """Start a command that keeps running; see :class:`Spawned`."""
        text = _shell(command)
        if sudo and os.geteuid() != 0:
            text = _sudo_wrap(text, self._sudo_password)
            stdin = _sudo_stdin(self._sudo_password, stdin)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", f"exec 2>&1; {text}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self._env,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        pin, pout = proc.stdin, proc.stdout

        def write(data: bytes) -> None:
            pin.write(data)
            pin.flush()

        def close() -> None:
            with contextlib.suppress(OSError):
                pin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            pout.close()

        spawned = Spawned(
            self._name,
            pout,
            read=lambda: os.read(pout.fileno(), 1 << 16),
            write=write,
            running=lambda: proc.poll() is None,
            close=close,
        )
        if stdin:
            spawned.write(stdin)
        return spawned

    def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        shutil.copyfile(local, remote)
        os.chmod(remote, mode)

    def get(self, remote: str, local: Path) -> None:
        shutil.copyfile(remote, local)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# SSH settings: ~/.ssh/config + inventory vars + explicit values


@dataclass(frozen=True)
class SSHSettings:
    """Everything needed to open one SSH connection, after config and inventory are merged."""

    name: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    identities_only: bool = False
    known_hosts_files: tuple[str, ...] = ()
    proxy_jump: str | None = None
    proxy_command: str | None = None
    password: str | None = field(default=None, repr=False)
    sudo_password: str | None = field(default=None, repr=False)
    # the ssh config file that was read (None: there was none)
    config_file: str | None = None


def default_ssh_config_path() -> Path:
    return Path(os.environ.get("PROVISION_SSH_CONFIG", "~/.ssh/config")).expanduser()


def _ssh_args_options(args: str) -> dict[str, str]:
    """``-o Key=Value``/``-o Key Value``, ``-i``, ``-p``, ``-l``, ``-J`` of ssh command-line args."""
    words = shlex.split(args)
    options: dict[str, str] = {}
    flag_keys = {"-i": "identityfile", "-p": "port", "-l": "user", "-J": "proxyjump", "-F": "_configfile"}
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word == "-o" and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        elif word in flag_keys and i + 1 < len(words):
            options[flag_keys[word]] = words[i + 1]
            i += 2
            continue
        if value is not None:
            key, sep, rest = value.partition("=")
            if not sep:
                key, _, rest = value.partition(" ")
            options[key.strip().lower()] = rest.strip()
        i += 1
    return options


def _pick_port(options: dict[str, str], looked: dict[str, Any]) -> str:
    return str(options.get("port") or looked.get("port") or 22)


def _unless_none(value: Any) -> str | None:
    return None if value is None or str(value).lower() == "none" else str(value)


def resolve_settings(target: HostTarget, ssh_config: Path | None = None) -> SSHSettings:
    """Merge, highest first: explicit target values, ssh options in inventory vars, ssh config.

    Reads files only (no host is contacted); what does not parse is BadInput.
    """
    import paramiko

    options: dict[str, str] = {}
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if target.vars.get(var):
            try:
                options.update(_ssh_args_options(str(target.vars[var])))
            except ValueError as exc:
                raise BadInput(f"{var} of host `{target.name}` does not parse: {exc}", "check its quotes") from None
    path = (
        Path(options.pop("_configfile")).expanduser()
        if "_configfile" in options
        else (ssh_config or default_ssh_config_path())
    )
    looked: dict[str, Any] = {}
    if path.is_file():
        try:
            looked = dict(paramiko.SSHConfig.from_path(str(path)).lookup(target.address))
        except (paramiko.SSHException, ValueError, OSError) as exc:
            raise BadInput(
                f"SSH config {path} does not parse: {exc}", "fix that file or pass another with -F"
            ) from None
    port_text = str(target.port or _pick_port(options, looked))
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise BadInput(f"invalid SSH port `{port_text}` for host `{target.name}`", "a port is a number from 1 to 65535")

    def pick(key: str) -> Any:
        return options.get(key, looked.get(key))

    identity = pick("identityfile")
    key_files: list[str] = []
    if target.key_file:
        key_files.append(target.key_file)
    if isinstance(identity, list):
        key_files += [str(k) for k in identity]
    elif identity:
        key_files.append(str(identity))
    known = pick("userknownhostsfile")
    known_files = shlex.split(known) if known else ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
    port = int(port_text)
    known_files = [os.path.expanduser(k) for k in known_files]
    for known_file in (*known_files, *GLOBAL_KNOWN_HOSTS):
        check_known_hosts_file(known_file)
    return SSHSettings(
        name=target.name,
        hostname=str(
            options.get("hostname")
            or (looked.get("hostname") if target.address == target.name else target.address)
            or target.address
        ),
        port=port,
        user=target.user or str(pick("user") or getpass.getuser()),
        key_files=tuple(dict.fromkeys(os.path.expanduser(k) for k in key_files)),
        identities_only=str(pick("identitiesonly") or "no").lower() == "yes",
        known_hosts_files=tuple(known_files),
        proxy_jump=_unless_none(pick("proxyjump")),
        proxy_command=_unless_none(pick("proxycommand")),
        password=str(target.vars["ansible_password"]) if target.vars.get("ansible_password") else None,
        sudo_password=target.become_password,
        config_file=str(path) if path.is_file() else None,
    )


def ssh_trust_args(target: HostTarget, ssh_config: Path | None = None) -> str:
    """OpenSSH options that make ``ssh`` (the apply, through Ansible) trust what the probe trusts.

    The same config file (``-F``: OpenSSH would read the passwd home's ``~/.ssh/config``, Python
    reads ``$HOME``'s; ``/dev/null`` where the probe read none), the same known_hosts files with
    ``~`` already expanded, and ``StrictHostKeyChecking=yes``: an unknown or changed key is
    refused (a key accepted with --accept-new-host-keys was recorded by the probe). They go
    ahead of the inventory's own ssh args because ssh takes the first value of an option.
    """
    settings = resolve_settings(target, ssh_config)

    def files(paths: Sequence[str]) -> str:
        # ssh_config(5) splits the value on whitespace; a path with a space is double-quoted
        return " ".join(f'"{p}"' if any(c.isspace() for c in p) else p for p in paths)

    return shlex.join(
        [
            "-F",
            settings.config_file or "/dev/null",
            "-o",
            f"UserKnownHostsFile={files(settings.known_hosts_files)}",
            "-o",
            f"GlobalKnownHostsFile={files(GLOBAL_KNOWN_HOSTS)}",
            "-o",
            "StrictHostKeyChecking=yes",
        ]
    )


# ---------------------------------------------------------------------------------------------
# Host keys


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _host_key_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


_KNOWN_HOSTS_LOCK = threading.Lock()


def record_host_key(path: str, hostname: str, port: int, key: paramiko.PKey) -> None:
    """Append a key to a known_hosts file (parallel probes may record several at once)."""
    import fcntl

    file = Path(path)
    with _KNOWN_HOSTS_LOCK:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(file, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.write(f"{_host_key_name(hostname, port)} {key.get_name()} {key.get_base64()}\n")


class _UnknownHostKey(Exception):
    def __init__(self, key: paramiko.PKey) -> None:
        super().__init__("unknown host key")
        self.key = key


# The system-wide known_hosts files, OpenSSH's GlobalKnownHostsFile default (ssh_config(5)).
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


def _load_known_hosts(client: paramiko.SSHClient, files: Sequence[str]) -> None:
    # The user's files and the system-wide ones, as ssh reads them; paramiko's lookup handles
    # hashed (|1|...) entries and [host]:port names. resolve_settings has checked every line.
    keys = client.get_host_keys()
    for path in (*files, *GLOBAL_KNOWN_HOSTS):
        for entry in _known_hosts_entries(path):
            for name in entry.hostnames:
                known = keys.lookup(name)
                if known is None or entry.key.get_name() not in known:  # the first entry wins, as in load
                    keys.add(name, entry.key.get_name(), entry.key)


def _known_hosts_entries(path: str) -> list[Any]:
    """The usable entries of a known_hosts file, parsed line by line as ``HostKeys.load`` does,
    except that lines with a marker (``@cert-authority``, ``@revoked``) are skipped: paramiko
    cannot use them and ``load`` stops at them. A host known only through such a line is
    unknown, so refused, never trusted. A line that does not decode raises BadInput naming it
    (``load`` raised ``InvalidHostKey`` without saying where: it escaped from connect() as a
    misleading ProxyJump error)."""
    import paramiko
    from paramiko.hostkeys import HostKeyEntry

    entries: list[Any] = []
    if not os.path.isfile(path):
        return entries
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for lineno, line in enumerate(lines, start=1):
                text = line.strip()
                if not text or text.startswith(("#", "@")):
                    continue
                try:
                    entry = HostKeyEntry.from_line(text, lineno)
                except paramiko.SSHException:  # e.g. a key type paramiko lacks: ssh skips unknown ones
                    continue
                except Exception:  # InvalidHostKey, and what a garbled key raises
                    raise BadInput(
                        f"known_hosts file {path} line {lineno}: the key does not decode",
                        f"fix or delete line {lineno} of {path}",
                    ) from None
                if entry is not None:  # None: fewer than three fields, skipped as load does
                    entries.append(entry)
    except OSError:  # unreadable: no keys from it, so its hosts are unknown
        return []
    return entries


def check_known_hosts_file(path: str) -> None:
    """BadInput naming the file and line where a line of ``path`` does not decode."""
    _known_hosts_entries(path)


# ---------------------------------------------------------------------------------------------
# SSH


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
        text = _shell(command)
        if sudo and self.settings.user != "root":
            text = _sudo_wrap(text, self.settings.sudo_password)
            stdin = _sudo_stdin(self.settings.sudo_password, stdin)
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise Unreachable(f"connection to {self.name} was lost", "check the host and try again")
        return text, stdin, transport

    def _run(self, transport: paramiko.Transport, text: str, timeout: float, stdin: bytes | None) -> CommandResult:
        import selectors

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
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommandTimeout(
                        f"command timed out after {timeout:g}s on {self.name}",
                        "raise the timeout or check what the command waits for",
                    )
                if not got:
                    waiter.select(min(left, 0.5))
            return CommandResult(chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace"))
        finally:
            waiter.close()
            chan.close()

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
    import paramiko

    client = paramiko.SSHClient()
    _load_known_hosts(client, settings.known_hosts_files)
    name = _host_key_name(settings.hostname, settings.port)

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            if not accept_new_host_keys:
                raise _UnknownHostKey(key)
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
    except _UnknownHostKey as exc:
        client.close()
        raise Unreachable(
            f"unknown host key for {settings.name} ({name}): {exc.key.get_name()} {fingerprint(exc.key)}",
            "check the fingerprint with the host's owner, then rerun with --accept-new-host-keys "
            f"to record it in {settings.known_hosts_files[0]}",
            details={"host": settings.name, "fingerprint": fingerprint(exc.key)},
        ) from None
    except paramiko.BadHostKeyException as exc:
        client.close()
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
