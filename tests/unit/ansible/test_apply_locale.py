"""ansible-playbook under the locales controllers really have, and its own words when it dies early.

Found on the first GPU machine lent to this work: `up --local --check` failed its only host with
"(not run)" and no reason. ansible-core exits before any host under a non-UTF-8 locale
("Ansible requires the locale encoding to be UTF-8", ansible/cli/__init__.py), and an explicit
``LC_ALL=C`` (cron, systemd units, minimal images) also turns off Python's own C-locale coercion
(PEP 538). These run the real ansible-playbook on a one-task local play.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from provision.ansible.apply import run_playbook, runner_environment, utf8_locale
from tests.support.local_play import write_play

TASKS = """\
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
"""


@pytest.mark.parametrize(
    ("env", "utf8"),
    [
        ({}, True),  # unset: Python coerces the C locale to C.UTF-8 (PEP 538)
        ({"LANG": "C"}, True),
        ({"LANG": "en_US.UTF-8"}, True),
        ({"LC_ALL": "de_DE.utf8"}, True),
        ({"LC_ALL": "C"}, False),  # explicit LC_ALL: no coercion
        ({"LC_ALL": "POSIX", "LANG": "en_US.UTF-8"}, False),  # LC_ALL wins over LANG
        ({"LANG": "en_US.ISO-8859-1"}, False),
        ({"LC_CTYPE": "en_US", "LANG": "en_US.UTF-8"}, False),  # LC_CTYPE wins over LANG
    ],
)
def test_which_environments_give_ansible_a_utf8_locale(env: dict[str, str], utf8: bool) -> None:
    assert utf8_locale(env) is utf8
    got = runner_environment(parent={"PATH": "/usr/bin", **env})
    if utf8:
        assert got.get("LC_ALL") == env.get("LC_ALL")  # left as the user set it
    else:
        assert got["LC_ALL"] == "C.UTF-8"
        assert utf8_locale(got)


def test_a_play_runs_when_the_controller_says_lc_all_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "C")
    run_dir, inventory = write_play(tmp_path, TASKS)
    got = run_playbook(run_dir, "site.yml", inventory=inventory, artifacts=tmp_path / "art")
    assert got.ok, got.error
    assert got.hosts["localhost"].ok
    assert got.error is None


def test_a_playbook_that_dies_before_any_host_says_why(tmp_path: Path) -> None:
    run_dir, inventory = write_play(tmp_path, TASKS.replace("ansible.builtin.debug", "ansible.builtin.no_such_module"))
    got = run_playbook(run_dir, "site.yml", inventory=inventory, artifacts=tmp_path / "art")
    assert not got.ok
    assert got.hosts == {}
    assert got.error is not None
    assert "no_such_module" in got.error
    assert "\x1b[" not in got.error


def test_ansible_found_through_pythonpath_reaches_ansible_playbook_too(tmp_path: Path) -> None:
    """How the GPU machine runs provision: its wheels unpacked with `pip install --target` and found
    through PYTHONPATH, by a Python whose own site has no ansible. ansible-playbook (a script for
    that Python) needs the same PYTHONPATH, or it dies with "No module named 'ansible'"."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ansible-playbook"  # as pip writes it for the bare Python
    script.write_text(f"#!{bare}/bin/python\nimport sys\nfrom ansible.cli.playbook import main\nsys.exit(main())\n")
    script.chmod(0o755)
    run_dir, inventory = write_play(tmp_path, TASKS)
    site = sysconfig.get_paths()["purelib"]  # this venv's: ansible, ansible_runner, provision's deps
    repo = Path(__file__).resolve().parents[3]
    code = (
        "import sys; from pathlib import Path; from provision.ansible.apply import run_playbook; "
        f"r = run_playbook(Path({str(run_dir)!r}), 'site.yml', inventory=Path({str(inventory)!r}), "
        f"artifacts=Path({str(tmp_path / 'art')!r})); print(r.ok, r.error); sys.exit(0 if r.ok else 1)"
    )
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{repo}:{site}"}
    done = subprocess.run([f"{bare}/bin/python", "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
