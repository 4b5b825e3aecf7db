"""Credentials in install URLs and the controller's environment stay private (issue 13).

Real parts throughout: `provision plan` and `provision up` over real SSH on the test hosts, a PEP
503 index on the bridge that answers only to its login (serving the local wheelhouse), and a
real tinyproxy that lets apt and pip through only with its own login (BasicAuth). The hosts
reach both through that proxy; pip must present the index login, apt and pip the proxy login,
or the install fails. Meanwhile `ps` is sampled on the controller and on every host: neither
secret may show up in a command line. Afterwards no file of the run that others could read holds
either secret, and the controller's fake AWS secret is nowhere in the run dir (the runner's
artifacts included).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from provision.model.settings import AptSettings, InstallSettings
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.up_harness import up_env
from tests.support.http_server import serving

pytestmark = pytest.mark.slow  # installs torch on a host

INDEX_TOKEN = "idx-Tok3n-5ecret"
APT_TOKEN = "apt-Tok3n-5ecret"
PROXY_TOKEN = "prx-Tok3n-5ecret"
AWS_SECRET = "fakeAWSsecret/Do-not-leak-0123456789"
SECRETS = (INDEX_TOKEN, PROXY_TOKEN, APT_TOKEN, AWS_SECRET)
TOKENS = (INDEX_TOKEN, PROXY_TOKEN, APT_TOKEN)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _LoginHandler(BaseHTTPRequestHandler):
    """Answers only to the Basic login ``expected``; every request's (path, authorized) goes into ``seen``."""

    expected = ""
    seen: ClassVar[list[tuple[str, bool]]] = []  # each server sets its own (_login_server)

    def authorized(self) -> bool:
        ok = self.headers.get("Authorization") == self.expected
        self.seen.append((self.path, ok))
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.end_headers()
        return ok

    def send_body(self, body: bytes, kind: str, with_body: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _login_server(
    address: str, login: str, handler: type[_LoginHandler], path: str
) -> Iterator[tuple[str, list[tuple[str, bool]]]]:
    """``handler`` served on ``address`` for ``login``: yields its URL + ``path`` (no login) and what it saw."""
    seen: list[tuple[str, bool]] = []
    expected = "Basic " + base64.b64encode(login.encode()).decode()
    with serving(type("Handler", (handler,), {"expected": expected, "seen": seen}), address) as url:
        yield url + path, seen


@contextmanager
def login_index(address: str, wheels: Path, login: str) -> Iterator[tuple[str, list[tuple[str, bool]]]]:
    """A PEP 503 simple index of ``wheels`` on ``address`` that answers only to Basic ``login``.

    Yields its URL (no login) and the list of (path, authorized) of every request it got."""
    projects: dict[str, list[str]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        projects.setdefault(re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower(), []).append(wheel.name)

    hashes = {n: hashlib.sha256((wheels / n).read_bytes()).hexdigest() for names in projects.values() for n in names}

    class Handler(_LoginHandler):
        # Links carry #sha256= as real indexes publish it (the plan locks the wheel closure by it),
        # and HEAD is answered (pip's metadata-only path asks it first; without Accept-Ranges it
        # then fetches the whole wheel).
        def do_GET(self) -> None:
            self._answer(with_body=True)

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def _answer(self, with_body: bool) -> None:
            if not self.authorized():
                return
            parts = [urllib.parse.unquote(p) for p in self.path.split("?")[0].split("/") if p]
            if len(parts) == 2 and parts[0] == "simple" and parts[1] in projects:
                links = (f'<a href="/files/{n}#sha256={hashes[n]}">{n}</a>\n' for n in projects[parts[1]])
                self.send_body("".join(links).encode(), "text/html", with_body)
            elif len(parts) == 2 and parts[0] == "files" and (wheels / parts[1]).is_file():
                self.send_body((wheels / parts[1]).read_bytes(), "application/octet-stream", with_body)
            else:
                self.send_response(404)
                self.end_headers()

    with _login_server(address, login, Handler, "/simple") as served:
        yield served


@contextmanager
def login_proxy(hostset: harness.HostSet, folder: Path, user: str, password: str) -> Iterator[tuple[str, Path]]:
    """A tinyproxy on the bridge that needs ``user``/``password`` (BasicAuth) and passes only the
    Debian mirror, PyPI and the bridge address (the login index). Yields its URL (no login) and log."""
    gw = f"{hostset.net}.1"
    port = _free_port(gw)
    folder.mkdir(parents=True, exist_ok=True)
    filt = folder / "filter"
    filt.write_text(
        "^deb\\.debian\\.org$\n^security\\.debian\\.org$\n^pypi\\.org$\n^files\\.pythonhosted\\.org$\n"
        f"^{re.escape(gw)}$\n"
    )
    conf = folder / "tinyproxy.conf"
    pid, log = folder / "tinyproxy.pid", folder / "tinyproxy.log"
    conf.write_text(
        f"Port {port}\nListen {gw}\nTimeout 600\nMaxClients 50\nAllow {hostset.net}.0/24\n"
        f'BasicAuth {user} {password}\nFilter "{filt}"\nFilterDefaultDeny Yes\nConnectPort 443\n'
        f'LogLevel Info\nPidFile "{pid}"\nLogFile "{log}"\n'
    )
    subprocess.run(["tinyproxy", "-c", str(conf)], check=True, timeout=30)
    for _ in range(100):
        if pid.exists() and pid.read_text().strip():
            break
        time.sleep(0.1)
    try:
        yield f"http://{gw}:{port}", log
    finally:
        if pid.exists():
            with suppress(ValueError, ProcessLookupError):
                os.kill(int(pid.read_text().strip()), 15)


@contextmanager
def ps_samples(hostset: harness.HostSet, hosts: list[harness.TestHost]) -> Iterator[dict[str, list[str]]]:
    """Every command line `ps` shows, sampled every 0.2 s on the controller and on each host while
    the block runs: {"controller": [...], host name: [...]}."""
    out: dict[str, list[str]] = {"controller": []}
    stop = threading.Event()

    def controller() -> None:
        while not stop.is_set():
            r = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=False)
            out["controller"].extend(r.stdout.splitlines())
            time.sleep(0.2)

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    for h in hosts:
        rh.ssh(
            hostset,
            h,
            "rm -f /root/ps.samples; nohup sh -c 'while :; do ps -eww -o args= >> /root/ps.samples; "
            "sleep 0.2; done' >/dev/null 2>&1 & echo $! > /root/ps.sampler",
        )
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        for h in hosts:
            text = rh.ssh(
                hostset,
                h,
                "kill $(cat /root/ps.sampler); cat /root/ps.samples; rm -f /root/ps.samples /root/ps.sampler",
                check=False,
            )
            out[h.name] = text.splitlines()


def _walk(top: Path) -> Iterator[Path]:
    yield top
    for path in sorted(top.rglob("*")):
        if not path.is_symlink():
            yield path


def test_credentials_stay_out_of_ps_and_of_files_others_can_read(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    gw = f"{testhosts.net}.1"
    host = testhosts.hosts[0]
    installs = "[{packages: ['" + harness.TORCH_CPU + "+cpu'], index_url: ''}]"  # the login index, not PyTorch's
    with (
        login_index(gw, wheelhouse, f"alice:{INDEX_TOKEN}") as (index, seen),
        login_proxy(testhosts, tmp_path / "proxy", "carol", PROXY_TOKEN) as (proxy, proxy_log),
    ):
        # the proxy really wants its login: a request without it is refused
        refused = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxy, f"{index}/"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert refused.stdout == "407", refused
        config = tmp_path / "provision.yaml"
        index_with_login = index.replace("http://", f"http://alice:{INDEX_TOKEN}@")
        proxy_with_login = proxy.replace("http://", f"http://carol:{PROXY_TOKEN}@")
        config.write_text(
            f"stack: {{frameworks: ['{harness.TORCH_CPU}+cpu'], driver: none}}\n"
            f"install: {{pip: {{index_url: '{index_with_login}', trusted_hosts: ['{index.split('/')[2]}']}}, "
            # a Debian mirror login too (issue 25): this run's roles never reach the mirror (no
            # driver), but its login travels through plan, up and the play like the others
            f"apt: {{proxy: '{proxy_with_login}', mirror: 'http://apt:{APT_TOKEN}@deb.example/debian'}}, "
            "cache: off}\n"
            "verify: {allow_cpu: true}\n"
        )
        env = {**up_env(), "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKE"}
        # the login index for the frameworks, in plan (which resolves the wheel closure there, with
        # the login) and in up alike
        common = [
            "-i",
            str(testhosts.inventory),
            "-F",
            str(testhosts.ssh_config),
            "-c",
            str(config),
            "--set",
            f"frameworks_installs={installs}",
        ]

        # Every leak found is collected, so that one run names them all (before the fix: each one).
        leaks: list[str] = []

        # plan --out: a private run dir; the credentials only in its 0600 secrets.yml
        out = tmp_path / "planned"
        planned = subprocess.run(
            [sys.executable, "-m", "provision", "plan", *common, "--out", str(out)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert planned.returncode == 0, planned.stderr
        # what plan prints names the login index with its login redacted (errors.redact)
        leaks += [f"plan printed {s}" for s in SECRETS if s in planned.stdout + planned.stderr]
        assert "http://***@" in planned.stdout + planned.stderr, planned.stdout
        leaks += _open_to_others(out)
        leaks += [
            f"plan --out: {p.relative_to(out)} holds a secret"
            for p in _walk(out)
            if p.is_file() and p.name != "secrets.yml" and any(s in p.read_text(errors="replace") for s in SECRETS)
        ]

        # up on one host (the lock's group has every host: --limit it), sampled by ps throughout.
        # The host's own apt proxy (the test proxy, which would win over install.apt.proxy) is
        # set aside: apt's only way out is the login proxy.
        args = [
            sys.executable,
            "-m",
            "provision",
            "up",
            *common,
            "--limit",
            host.name,
            "--yes",
            "--json",
        ]
        own = "/etc/apt/apt.conf.d/01testhost-proxy"
        # apt must fetch something for the proxy to be seen
        rh.ssh(testhosts, host, f"mv {own} /root/01testhost-proxy.aside; {rh.PURGE_PYTHON_ENV_PACKAGES}")
        try:
            with ps_samples(testhosts, [host]) as samples:
                r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=1500)
        finally:
            rh.ssh(testhosts, host, f"mv /root/01testhost-proxy.aside {own}")
        assert r.stdout.strip(), r.stderr[-3000:]
        doc = json.loads(r.stdout)
        proxy_seen = proxy_log.read_text(errors="replace") if proxy_log.exists() else ""
    try:
        run_dir = tmp_path / ".provision" / "runs" / doc.get("run", "-")
        report = run_dir / "report.json"
        details = json.loads(report.read_text())["details"] if report.exists() else []
        assert r.returncode == 0 and doc["ok"], ([d.get("message") for d in details], r.stderr[-2000:])
        leaks += [f"up printed {s}" for s in SECRETS if s in r.stdout + r.stderr]
        # pip got its wheels from the login index, with the login (and only through the proxy's login)
        assert any(path.startswith("/files/torch-") and ok for path, ok in seen), seen[-20:]
        assert all(ok for path, ok in seen if path.startswith("/files/")), seen
        # apt went through the login proxy too (the proxy log names the Debian mirror)
        assert "deb.debian.org" in proxy_seen, proxy_seen[-2000:]
        # the samples saw the pip run on the host and the ssh commands on the controller ...
        assert any("pip" in line and "install" in line for line in samples[host.name]), "ps missed the pip run"
        assert any(line.startswith("ssh ") and "python" in line for line in samples["controller"])

        # ... and no command line ever held a secret
        for where, lines in samples.items():
            shown = [line for line in lines if any(s in line for s in SECRETS)]
            if shown:
                leaks.append(f"ps on {where}: {len(shown)} command lines with a secret, e.g. {shown[0][:300]}")
        leaks += _open_to_others(run_dir)
        for path in _walk(run_dir):
            if path.is_file():
                text = path.read_text(errors="replace")
                if AWS_SECRET in text:
                    leaks.append(f"up: {path.relative_to(run_dir)} holds the controller's AWS secret")
                if path.name != "secrets.yml" and any(t in text for t in TOKENS):
                    leaks.append(f"up: {path.relative_to(run_dir)} holds a token")
        # the runner's own record of the run keeps no environment
        commands = list(run_dir.rglob("artifacts/*/command"))
        assert commands, "no runner artifacts"
        leaks += [
            f"{c.relative_to(run_dir)} keeps the environment" for c in commands if "env" in json.loads(c.read_text())
        ]

        # the host keeps no credential: the folder is gone, and no file holds the tokens
        left = rh.ssh(
            testhosts,
            host,
            "ls -d /root/.provision-credentials* 2>/dev/null; grep -rlF -e "
            f"{INDEX_TOKEN} -e {PROXY_TOKEN} -e {APT_TOKEN} /etc /opt/provision /tmp /root /var/log 2>/dev/null",
            check=False,
        )
        leaks += [f"{host.name}: {line}" for line in left.split()]
        assert not leaks, "\n".join(leaks)
    finally:
        rh.unprovision(testhosts, [host])


def _open_to_others(top: Path) -> list[str]:
    """What under ``top`` group or others may read or enter (folders 0700, files 0600 at most)."""
    return [f"{path} is {stat.filemode(path.stat().st_mode)}" for path in _walk(top) if path.stat().st_mode & 0o077]


@contextmanager
def login_mirror(address: str, upstream: str, login: str) -> Iterator[tuple[str, list[tuple[str, bool]]]]:
    """A Debian mirror on ``address`` that answers only to Basic ``login``: every GET it is allowed
    is fetched from ``upstream`` (the controller's Debian mirror). Yields its URL (no login) and the
    list of (path, authorized) of every request it got."""

    class Handler(_LoginHandler):
        def do_GET(self) -> None:
            if not self.authorized():
                return
            try:
                with urllib.request.urlopen(upstream + self.path.removeprefix("/debian"), timeout=60) as got:
                    body = got.read()
            except urllib.error.HTTPError as exc:
                self.send_response(exc.code)
                self.end_headers()
                return
            self.send_body(body, "application/octet-stream")

    with _login_server(address, login, Handler, "/debian") as served:
        yield served


def test_an_apt_mirror_login_is_only_in_apts_root_only_file(testhosts: harness.HostSet, tmp_path: Path) -> None:
    """install.apt.mirror with a login (issue 25, item 6): the nvidia_driver role's Debian sources
    tasks, as the distro method runs them, with the run dir provision renders (secrets.yml as the
    play's vars_files); then the host's own `apt-get update` reaches the login mirror. The
    DKMS driver install after them is test_roles.py's; only the sources part runs here."""
    host = testhosts.hosts[-1]
    gw = f"{testhosts.net}.1"
    rh.reach_bridge_directly(testhosts, host)  # the hosts' filtering proxy passes only Debian and PyPI
    with login_mirror(gw, "http://deb.debian.org/debian", f"apt:{APT_TOKEN}") as (mirror, seen):
        group = rh.lock_group("mirror", [host.name], gpu="L4", gpu_count=1, os="debian-12", install_method="distro")
        install = InstallSettings(apt=AptSettings(mirror=mirror.replace("http://", f"http://apt:{APT_TOKEN}@")))
        run = rh.render(tmp_path / "run", testhosts, host, group, install=install)
        holders = sorted(str(p.relative_to(run)) for p in _walk(run) if p.is_file() and APT_TOKEN in p.read_text())
        assert holders == ["secrets.yml"]
        (run / "mirror.yml").write_text(
            yaml.safe_dump(
                [
                    {
                        "hosts": "all",
                        "become": True,
                        "vars_files": ["secrets.yml"],
                        "tasks": [
                            {"ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "debian-sources"}},
                            {"ansible.builtin.apt": {"update_cache": True}},
                        ],
                    }
                ]
            )
        )
        applied = subprocess.run(
            [str(rh.BIN / "ansible-playbook"), "mirror.yml"],
            cwd=run,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PATH": f"{rh.BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"},
        )
        try:
            assert applied.returncode == 0, applied.stdout[-3000:]
            assert APT_TOKEN not in applied.stdout + applied.stderr
            # apt fetched the mirror's lists with the login, and only with it
            fetched = [path for path, ok in seen if ok]
            assert any(path.endswith("/InRelease") for path in fetched), seen[-20:]
            # the host: the login in apt's root-only file alone, none in the world-readable sources
            left = rh.ssh(
                testhosts,
                host,
                f"grep -rlF {APT_TOKEN} /etc /var/lib/apt /var/log /root /tmp 2>/dev/null | "
                "xargs -r stat -c '%n %a %U'; grep -c 'http://[^ ]*@' /etc/apt/sources.list.d/provision-debian-nonfree.list",
                check=False,
            )
            assert left.splitlines() == ["/etc/apt/auth.conf.d/provision-debian-mirror.conf 600 root", "0"], left
        finally:
            rh.ssh(
                testhosts,
                host,
                "rm -f /etc/apt/auth.conf.d/provision-debian-mirror.conf "
                f"/etc/apt/sources.list.d/provision-debian-nonfree.list /var/lib/apt/lists/{gw}[:_]*",
                check=False,
            )
