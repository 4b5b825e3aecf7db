"""Two or three real examples at the end of every command's ``--help`` (issue 28): by command path.

Kept in one table rather than beside each command so that one test can parse every line of it
through the real commands (tests/unit/cli/test_help_examples.py): an example that stops parsing
fails there, not in front of a user.
"""

from __future__ import annotations

import click

EXAMPLES: dict[str, list[str]] = {
    "provision": [
        "provision up --local --check --yes      # a dry run on this machine",
        "provision plan -i hosts.ini             # review the plan for an inventory",
        "provision up -i hosts.ini -K            # apply it; asks for the sudo password once",
    ],
    "up": [
        "provision up --local --check --yes",
        "provision up -i hosts.ini -l 'gpu[01-04]' -u ubuntu -K",
        "provision up -i hosts.ini --from-lock provision.lock --serial 4 --yes",
    ],
    "plan": [
        "provision plan --local",
        "provision plan -i hosts.ini --framework 'torch>=2.6' --lock-out provision.lock",
        "provision plan --assume os=ubuntu-24.04,gpu=H100-SXM:8,name=gpu1",
    ],
    "resolve": [
        "provision resolve --gpu H100-SXM --gpu-count 8 --os ubuntu-24.04",
        "provision resolve --instance-type g6.xlarge --framework 'jax[cuda12]'",
    ],
    "matrix": [
        "provision matrix --gpu A10G --framework torch",
        "provision matrix --drivers",
        "provision matrix --instances",
    ],
    "probe": [
        "provision probe",
        "provision probe ubuntu@192.0.2.11 --venv /opt/dl",
        "provision probe -i hosts.ini --json",
    ],
    "verify": [
        "provision verify --local --allow-cpu",
        "provision verify -i hosts.ini --lock provision.lock",
    ],
    "status": [
        "provision status",
        "provision status --check-drift -i hosts.ini",
    ],
    "rollback": [
        "provision rollback -i hosts.ini --yes",
        "provision rollback -i hosts.ini --limit gpu07 --to 3f9c2a1b7d4e5f60 --yes",
    ],
    "bundle": [
        "provision bundle provision.lock -o site.tar.gz   # on a controller that reaches the sources",
        "provision bundle --verify site.tar.gz            # check every file against its MANIFEST",
        "provision up -i hosts.ini --bundle site.tar.gz --yes   # at the site: no network use",
    ],
    "health": [
        "provision health --local",
        "provision health -i hosts.ini --limit 'gpu*' --json",
    ],
    "cloud": [
        "provision cloud up --gpu L4 --ssh-cidr 203.0.113.7/32",
        "provision cloud ls",
        "provision cloud down --all --dry-run",
    ],
    "cloud up": [
        "provision cloud up --gpu L4 --ssh-cidr 203.0.113.7/32",
        "provision cloud up --instance-type g6.xlarge --spot --ttl 2h --ssh-cidr 203.0.113.7/32 --yes",
    ],
    "cloud ls": ["provision cloud ls", "provision cloud ls --region us-east-1 --json"],
    "cloud down": [
        "provision cloud down --run RUN_ID",
        "provision cloud down --expired --yes",
        "provision cloud down --all --dry-run",
    ],
    "advise": [
        "provision advise gpu --params 7B --mode lora",
        "provision advise cost --instance-type g6.xlarge --hours-per-day 8 --server-price 12000",
    ],
    "advise gpu": [
        "provision advise gpu --params 70B --precision bf16",
        "provision advise gpu --params 7B --mode qlora --top 5",
    ],
    "advise cost": [
        "provision advise cost --instance-type g6.xlarge --hours-per-day 8 --server-price 12000",
        "provision advise cost --cloud-price 1.2 --hours-per-day 24 --server-price 30000 --years 4",
    ],
    "tune": ["provision tune --local", "provision tune -i hosts.ini --timeout 1800"],
}


def add_examples(command: click.Command, path: str) -> click.Command:
    """``command`` with its examples as the epilog (once: a command is loaded once per process)."""
    lines = EXAMPLES.get(path)
    if lines and not command.epilog:
        # "\b": click keeps the block's lines as written (no rewrapping of the commands)
        command.epilog = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
    return command
