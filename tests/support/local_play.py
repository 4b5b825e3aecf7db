"""A one-play run dir on the controller (``connection: local``), for tests that run the real
ansible-playbook through run_playbook without a host."""

from __future__ import annotations

from pathlib import Path

HEADER = """\
- name: A one-task play on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
"""


def write_play(directory: Path, tasks: str) -> tuple[Path, Path]:
    """``site.yml`` (:data:`HEADER` then ``tasks``) and an inventory of localhost in ``directory``."""
    (directory / "site.yml").write_text(HEADER + tasks, encoding="utf-8")
    inventory = directory / "inventory.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n", encoding="utf-8")
    return directory, inventory
