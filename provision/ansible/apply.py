"""A typed facade over ansible-runner: the only module that talks to it.

It runs a rendered run dir's playbook, reduces the runner's event stream to per-host progress
(current role and task, tasks done, changed/failed), keeps every event as a JSON line in the run's
artifacts, and reads changed/failed/unreachable from the runner's final stats. No raw
ansible-runner keyword arguments exist outside this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from provision.ansible.rundir import private_umask
from provision.errors import END_SIGNALS, OperationFailed, SignalInterrupt, redact, signal_taken
from provision.files import replace_file

if TYPE_CHECKING:
    from ansible_runner import Runner

# Events that end a task on one host; the key is the runner's event name.
_HOST_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class HostProgress:
    """What one host is doing and has done, as the event stream tells it."""

    host: str
    role: str | None = None
    task: str | None = None
    tasks_done: int = 0
    changed: int = 0
    failed: bool = False
    unreachable: bool = False
    failed_task: str | None = None
    message: str | None = None
    started: float = field(default_factory=time.monotonic)
    # seconds spent per role, for the report's "time per role"
    role_seconds: dict[str, float] = field(default_factory=dict)
    _task_started: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("_task_started")
        doc.pop("started")
        return doc


class EventReducer:
    """Folds ansible-runner events into :class:`HostProgress` per host (pure; no I/O)."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostProgress] = {}
        self._task: str | None = None
        self._role: str | None = None

    def host(self, name: str) -> HostProgress:
        if name not in self.hosts:
            self.hosts[name] = HostProgress(host=name)
        return self.hosts[name]

    def feed(self, event: dict[str, Any]) -> HostProgress | None:
        """Take one event; return the host whose progress changed, if any."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_task_start":
            self._task = data.get("task") or data.get("name")
            self._role = data.get("role") or None
            return None
        if kind == "runner_on_start":
            progress = self.host(data.get("host", "?"))
            progress.task, progress.role = data.get("task") or self._task, data.get("role") or self._role
            progress._task_started = time.monotonic()
            return progress
        outcome = _HOST_RESULT_EVENTS.get(kind)
        if outcome is None or "host" not in data:
            return None
        progress = self.host(data["host"])
        progress.task = data.get("task") or self._task
        progress.role = data.get("role") or self._role or progress.role
        progress.tasks_done += 1
        if progress._task_started is not None:
            role = progress.role or "(playbook)"
            elapsed = time.monotonic() - progress._task_started
            progress.role_seconds[role] = progress.role_seconds.get(role, 0.0) + elapsed
            progress._task_started = None
        result = data.get("res") or {}
        ignored = bool(data.get("ignore_errors"))
        if outcome == "ok" and result.get("changed"):
            progress.changed += 1
        elif outcome == "failed" and not ignored:
            progress.failed = True
            progress.failed_task = progress.task
            progress.message = _message(result)
        elif outcome == "unreachable":
            progress.unreachable = True
            progress.failed_task = progress.task
            progress.message = _message(result)
        return progress


# What OpenSSH says when StrictHostKeyChecking=yes refuses a host (sshconnect.c), after its banner.
_HOST_KEY_REFUSED = re.compile(r"Host key for \S+ has changed|No \S+ host key is known for \S+")


def _message(result: dict[str, Any]) -> str:
    text = result.get("msg") or result.get("stderr") or result.get("reason") or "failed"
    if "Host key verification failed" in str(text):  # one line instead of ssh's 20-line warning
        why = _HOST_KEY_REFUSED.search(str(text))
        return (
            f"host key verification failed: {why.group(0) if why else 'the key is not trusted'}"
            " (the apply trusts the known_hosts the probe used; `provision probe` shows the key)"
        )
    stderr = str(result.get("stderr") or "").strip()
    if stderr and text == "non-zero return code":  # a command's own words say what went wrong
        text = f"{text}: {stderr.splitlines()[-1]}"
    return redact(" ".join(str(text).split()))[:500]  # a tool's words may quote a URL with its login


@dataclass(frozen=True)
class HostOutcome:
    """One host's result of a playbook run, from the runner's final stats."""

    host: str
    ok: bool
    changed: int
    unreachable: bool
    failed_task: str | None
    message: str | None
    role_seconds: dict[str, float]


@dataclass(frozen=True)
class ApplyResult:
    status: str  # the runner's: successful, failed, canceled, timeout
    rc: int
    hosts: dict[str, HostOutcome]
    artifacts: Path
    events: Path
    # ansible-playbook's own last words when it ended before any host ran (a locale it refuses,
    # a playbook it cannot parse, an inventory it cannot read): without them the host's failure
    # would name no cause
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "successful" and all(h.ok for h in self.hosts.values())


def ansible_bin_dir() -> Path:
    """Where ansible-playbook lives: beside this Python (a venv that need not be activated)."""
    here = Path(sys.executable).parent
    if (here / "ansible-playbook").exists():
        return here

    found = shutil.which("ansible-playbook")
    if found is None:
        raise OperationFailed("ansible-playbook is not installed", "pip install provision into this Python")
    return Path(found).parent


# What ansible-playbook gets from provision's own environment, and why; nothing else passes (the
# controller's AWS keys, tokens and the like are no business of the play, and ansible-runner
# would write whatever it gets into its artifacts):
RUNNER_ENV_ALLOW = frozenset(
    {
        "PATH",  # finds ssh, and ansible-playbook beside this Python
        "HOME",  # ~/.ssh (config, keys, known_hosts) and ~/.ansible (temporary files, ControlPath)
        "USER",
        "LOGNAME",  # the login name ssh and Ansible fall back on
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",  # ansible-core requires a UTF-8 locale
        "TZ",
        "TMPDIR",
        "SSH_AUTH_SOCK",  # keys held by an ssh-agent
        "KRB5CCNAME",  # Kerberos (GSSAPI) tickets for ssh
        # where provision itself found ansible when it is not in the interpreter's own site
        # (a `pip install --target` folder, a checkout run in place): ansible-playbook is the same
        # Python and fails without it ("No module named 'ansible'", seen on the GPU machine)
        "PYTHONPATH",
    }
)
# Not the controller's http(s)_proxy: ansible-playbook itself only runs ssh (ProxyJump and
# ProxyCommand come from the ssh config); the hosts' proxy is install.apt.proxy, set per play.
# Not the user's own ANSIBLE_*: the run dir's ansible.cfg is the configuration, so `up` and a
# plain `ansible-playbook site.yml` in the run dir do the same. The caller's ``envvars`` (host-key
# settings, ANSIBLE_CONFIG, ...) are added on top.


def runner_environment(
    envvars: Mapping[str, str] | None = None, *, parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment ansible-playbook runs in: the allow-listed part of ``parent`` (this
    process's environment), ansible-playbook's folder first on PATH, then ``envvars``."""
    parent = os.environ if parent is None else parent
    env = {k: v for k, v in parent.items() if k in RUNNER_ENV_ALLOW}
    env["PATH"] = f"{ansible_bin_dir()}{os.pathsep}{parent.get('PATH', '')}"
    if not utf8_locale(env):
        # ansible-core refuses to start under any other locale encoding ("Ansible requires the
        # locale encoding to be UTF-8", ansible/cli/__init__.py initialize_locale), and an explicit
        # LC_ALL=C (cron, systemd units, minimal containers) also stops Python's own C-locale
        # coercion (PEP 538). C.UTF-8 changes only the encoding: messages stay untranslated.
        env["LC_ALL"] = "C.UTF-8"
    env.update(envvars or {})
    return env


# Terminal colour codes: ansible-playbook runs on the pseudo-terminal ansible-runner gives it
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UTF8 = re.compile(r"\.utf-?8(@|$)", re.IGNORECASE)


def utf8_locale(env: Mapping[str, str]) -> bool:
    """Whether ``env`` gives a process a UTF-8 character type: the first of LC_ALL, LC_CTYPE and
    LANG that is set (POSIX's order) names a UTF-8 locale. Unset, or C/POSIX without LC_ALL, is
    coerced to C.UTF-8 by Python itself (PEP 538), which ansible-playbook is."""
    value = next((env[k] for k in ("LC_ALL", "LC_CTYPE", "LANG") if env.get(k)), "")
    if not value or (value in ("C", "POSIX") and not env.get("LC_ALL")):
        return True
    return bool(_UTF8.search(value))


def listed_tasks(run_dir: Path, playbook: str, *, inventory: Path, limit: str | None = None) -> int | None:
    """How many tasks ``ansible-playbook --list-tasks`` lists per host (None when it cannot say).

    Tasks that roles include dynamically (``include_tasks``) are not listed, so a host can do more
    than this; progress shows it as an estimate ("of ~66").
    """

    env = runner_environment()
    if (run_dir / "ansible.cfg").exists():
        env["ANSIBLE_CONFIG"] = str(run_dir / "ansible.cfg")
    command = [str(ansible_bin_dir() / "ansible-playbook"), playbook, "-i", str(inventory), "--list-tasks"]
    if limit:
        command += ["--limit", limit]
    try:
        listed = subprocess.run(command, cwd=run_dir, env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return sum(1 for line in listed.stdout.splitlines() if "TAGS:" in line)


def run_playbook(
    run_dir: Path,
    playbook: str,
    *,
    inventory: Path,
    artifacts: Path,
    check: bool = False,
    limit: str | None = None,
    forks: int | None = None,
    extravars: Mapping[str, object] | None = None,
    envvars: dict[str, str] | None = None,
    passwords: dict[str, str] | None = None,
    on_progress: Callable[[HostProgress], None] | None = None,
    verbosity: int = 0,
    echo: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Run ``run_dir/playbook`` against ``inventory``; events go to ``artifacts/events.jsonl``.

    ``echo`` gets what ansible-playbook prints (each event's own output, colours stripped,
    secrets redacted) as it happens; ``verbosity`` is ansible-playbook's ``-v`` count.

    ``passwords`` answers ansible-playbook's prompts ({regex: answer}, e.g. the play's sudo
    password prompts) through the terminal ansible-runner drives, so they reach no file, no
    environment and no command line.
    """

    from ansible_runner.interface import init_runner  # noqa: PLC0415 (ansible_runner is heavy: only an apply loads it)

    reducer = EventReducer()
    events_path = artifacts / "events.jsonl"
    cmdline = ["--check", "--diff"] if check else []
    ours = {"ANSIBLE_CONFIG": str(run_dir / "ansible.cfg")} if (run_dir / "ansible.cfg").exists() else {}
    env = runner_environment(
        {
            **ours,
            **(envvars or {}),
            # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless the caller sets it
            # (ansible_runner/config/_base.py), and the environment beats ansible.cfg: ssh would get
            # -o StrictHostKeyChecking=no ahead of the inventory's options. Host keys are checked.
            "ANSIBLE_HOST_KEY_CHECKING": "True",
        }
    )

    # A ControlPersist master left by an earlier run (ansible's default ~/.ansible/cp, keyed by
    # host, port and user) would carry this run's connections without a new key exchange, so a
    # host whose key changed since would not be noticed. Each run gets its own masters; a short
    # path under /tmp keeps the socket names within the 108 bytes a UNIX socket allows.
    control_dir = tempfile.TemporaryDirectory(prefix="provision-cp-")
    env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = control_dir.name

    with private_umask():
        (artifacts / "runner").mkdir(parents=True, exist_ok=True)
        for folder in (artifacts, artifacts / "runner"):
            folder.chmod(0o700)
    with control_dir, private_umask(), events_path.open("w", encoding="utf-8") as sink:

        def handle(event: dict[str, Any]) -> bool:
            _write_event(sink, event)
            changed = reducer.feed(event)
            if changed is not None and on_progress is not None:
                on_progress(changed)
            if echo is not None and (said := ANSI.sub("", str(event.get("stdout") or "")).strip()):
                echo(redact(said))
            return True  # keep the runner's own artifact copy of the event too

        with _signals_cancel() as cancelled:
            runner = init_runner(
                private_data_dir=str(artifacts / "runner"),
                project_dir=str(run_dir),
                playbook=playbook,
                inventory=str(inventory),
                cmdline=" ".join(cmdline) or None,
                limit=limit,
                forks=forks,
                extravars=dict(extravars or {}),
                envvars=env,
                passwords=passwords or {},
                event_handler=handle,
                quiet=True,
                suppress_env_files=True,  # env files would copy envvars (proxies, keys) to disk
                cancel_callback=cancelled,
                verbosity=verbosity or None,
            )
            # The runner seeds the play's environment with all of this process's environment
            # (RunnerConfig.prepare_env: os.environ.copy()); keep only ours and what the runner
            # itself set for its callback plugin (PYTHONPATH, ANSIBLE_CALLBACK_PLUGINS, ...).
            runner.config.env = _without_inherited(runner.config.env, env)
            try:
                runner.run()
            finally:
                _end_ssh_masters(Path(control_dir.name))
                _forget_environment(Path(runner.config.artifact_dir) / "command")
                _owner_only(artifacts)
    if (signum := cancelled()) is not None:  # the runner stopped ansible-playbook; now stop the caller
        raise SignalInterrupt(signum)
    stats = runner.stats or {}
    hosts = _outcomes(stats, reducer)
    return ApplyResult(
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else 1),
        hosts=hosts,
        artifacts=artifacts,
        events=events_path,
        error=None if hosts or runner.status == "successful" else _last_words(runner),
    )


def _last_words(runner: Runner, lines: int = 3) -> str | None:
    """The last few lines ansible-playbook printed (the runner's stdout artifact), redacted."""
    try:
        with runner.stdout as out:
            text = out.read()
    except (OSError, AttributeError, ValueError):
        return None
    said = [line.strip() for line in ANSI.sub("", text).splitlines() if line.strip()]
    # from ansible's own error line on ("ERROR! ..." up to 2.18, "[ERROR]: ..." from 2.19), which
    # comes before the snippet of the file it quotes; else the last lines
    first = next((i for i, line in enumerate(said) if re.match(r"\[?ERROR", line)), max(0, len(said) - lines))
    return redact(" ".join(said[first : first + lines]))[:500] or None


def _without_inherited(
    prepared: Mapping[str, str], ours: Mapping[str, str], *, parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``prepared`` less what it only inherited from ``parent``: ours, plus what the runner added
    or changed (a key of ``parent`` with another value here was set by the runner)."""
    parent = os.environ if parent is None else parent
    return {k: v for k, v in prepared.items() if k in ours or parent.get(k) != v}


def _owner_only(top: Path) -> None:
    """Close everything under ``top`` to group and others. The umask covers what is created, but
    Ansible's jsonfile fact cache chmods its files 0644 (the runner points it into the artifacts)."""
    for path in [top, *top.rglob("*")]:
        try:
            if not path.is_symlink() and path.stat().st_mode & 0o077:
                path.chmod(path.stat().st_mode & 0o700)
        except OSError:
            continue


def _forget_environment(command_file: Path) -> None:
    """ansible-runner writes ``artifacts/<ident>/command`` as {command, cwd, env}: drop ``env``.

    The runner writes it (0600) as the run starts, with no way to leave the environment out; the
    environment is already only the allow-listed part (:func:`runner_environment`), and from the
    end of the run on no artifact keeps any of it (a caller's envvars may carry a password).
    """
    try:
        doc = json.loads(command_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(doc, dict) and "env" in doc:
        doc.pop("env")
        replace_file(command_file, json.dumps(doc, ensure_ascii=False))


@contextmanager
def _signals_cancel() -> Iterator[Callable[[], int | None]]:
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP during a run: the signal's number, which the runner
    polls as its cancel callback (None until one came).

    Left to itself, ansible-runner installs SIGINT/SIGTERM handlers that only cancel the run and
    stay installed afterwards, so Ctrl-C would end the playbook and then be swallowed (`up`
    went on to verify and report success). A KeyboardInterrupt raised inside the runner's loop
    (what `up`'s SIGTERM/SIGHUP handler does elsewhere) would leave ansible-playbook running, in
    its own session, out of reach of any signal to provision's process group. With the flag the
    runner kills ansible-playbook's whole process group and waits for it (Runner.run:
    handle_termination's killpg, then child.close()), and the caller raises
    :class:`SignalInterrupt`. Outside the main thread signals cannot be handled: no flag.
    """
    fired: list[int] = []

    def cancelled() -> int | None:
        return fired[0] if fired else None

    if threading.current_thread() is not threading.main_thread():
        yield cancelled
        return

    def take(signum: int, _frame: object) -> None:
        fired.append(signum)
        signal_taken(signum)  # a second SIGTERM during up's cleanup is then only said

    previous = {s: signal.signal(s, take) for s in (signal.SIGINT, *END_SIGNALS)}
    try:
        yield cancelled
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _end_ssh_masters(control_dir: Path) -> None:
    """End the run's ssh processes that outlive ansible-playbook: ControlPersist masters detach
    from it (their own session: its killpg misses them) and stay 60 s (ansible.cfg's
    ControlPersist); one still in its key exchange when the play was killed binds its socket only
    later, so a sweep of the sockets (``ssh -O exit``) can miss it. Every one of them names the
    run's own control folder in its arguments (Ansible's ``-o ControlPath=``, then the master's
    title ``ssh: <path> [mux]``): those get SIGTERM, the sweep repeated until none is left (5 s)."""

    deadline = time.monotonic() + 5.0
    while True:
        try:
            listed = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return
        pids = [
            int(pid)
            for pid, _, args in (line.strip().partition(" ") for line in listed.stdout.splitlines())
            if pid.isdigit() and str(control_dir) in args and int(pid) != os.getpid()
        ]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(0.2)


def _outcomes(stats: dict[str, dict[str, int]], reducer: EventReducer) -> dict[str, HostOutcome]:
    names = set(reducer.hosts)
    for key in ("ok", "changed", "failures", "dark", "skipped", "processed"):
        names |= set(stats.get(key, {}))
    outcomes = {}
    for name in sorted(names):
        progress = reducer.host(name)
        failed = bool(stats.get("failures", {}).get(name)) or progress.failed
        dark = bool(stats.get("dark", {}).get(name)) or progress.unreachable
        outcomes[name] = HostOutcome(
            host=name,
            ok=not failed and not dark,
            # the stats are the truth for counts; the reducer only fills in what stats lack
            changed=int(stats.get("changed", {}).get(name, progress.changed)),
            unreachable=dark,
            failed_task=progress.failed_task if (failed or dark) else None,
            message=progress.message if (failed or dark) else None,
            role_seconds=dict(progress.role_seconds),
        )
    return outcomes


def _write_event(sink: TextIO, event: dict[str, Any]) -> None:
    # Keep what a report needs; drop stdout blobs (already in the runner's artifacts).
    slim: dict[str, Any] = {k: event[k] for k in ("uuid", "counter", "event", "created") if k in event}
    data = event.get("event_data") or {}
    kept: dict[str, Any] = {k: data[k] for k in ("host", "task", "role", "play", "duration") if k in data}
    res = data.get("res")
    if isinstance(res, dict):
        kept["changed"] = bool(res.get("changed"))
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            kept["msg"] = _message(res)
    slim["event_data"] = kept
    sink.write(json.dumps(slim, default=str) + "\n")
    sink.flush()
