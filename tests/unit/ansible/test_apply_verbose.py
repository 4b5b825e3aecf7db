"""`up -v`: what ansible-playbook prints reaches the user as it happens (run_playbook's ``echo``),
and each further v is one of ansible-playbook's own ``-v`` (its task results in full). The real
ansible-playbook on a one-task local play."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.ansible.apply import run_playbook
from tests.support.local_play import write_play

TASKS = """\
    - name: Print a word
      ansible.builtin.set_fact:
        word: a-word-from-the-task
"""


@pytest.mark.parametrize("verbosity", [0, 1])
def test_echo_gets_ansibles_output_and_verbosity_its_results(tmp_path: Path, verbosity: int) -> None:
    _, inventory = write_play(tmp_path, TASKS)
    said: list[str] = []
    got = run_playbook(
        tmp_path, "site.yml", inventory=inventory, artifacts=tmp_path / "art", verbosity=verbosity, echo=said.append
    )
    assert got.ok, got.error
    text = "\n".join(said)
    assert "TASK [Print a word]" in text and "ok: [localhost]" in text and "PLAY RECAP" in text
    assert "\x1b[" not in text  # colours stripped
    # ansible-playbook -v prints the task's result (the fact it set); without -v only ok
    assert ("a-word-from-the-task" in text) is (verbosity >= 1)
