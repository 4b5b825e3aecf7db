"""Lock + inventory -> an Ansible run dir (``site.yml``, ``inventory.yml``, ``group_vars/``,
``ansible.cfg``, ``provision.lock``) that plain ``ansible-playbook site.yml`` runs.

Python renders only the glue; the roles under ``playbooks/roles`` are static and read what is
rendered here through their documented variables (each role's ``defaults/main.yml``).

Double templating: the templates in ``templates/`` use ``[[ ]]`` delimiters, so Ansible's
``{{ }}`` would pass through them untouched; the data parts are dumped with ``yaml.safe_dump``
(nothing can inject YAML) and refused when a string holds a Jinja marker (so nothing a user typed,
a host name, a path, a mirror URL, is ever templated by Ansible). Values are validated first, so
a bad one is a one-line ``BadInput`` rather than a broken run dir.

This module renders the run dir's text (pure); its parts live beside it: ``checks`` (values),
``roles`` (the roles and their argument specs), ``settings`` (install settings, credentials),
``role_vars`` (lock group -> role variables) and ``rundir`` (writing it on disk).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provision.ansible.checks import _CFG_PATH, _check_text, check_host_name, dump, refuse_templates
from provision.ansible.role_vars import group_vars
from provision.ansible.roles import BUNDLED_ROLES_PATH, ROLES, check_overrides
from provision.ansible.settings import CREDENTIALS_DIR, split_credentials
from provision.errors import BadInput
from provision.hosts.runlock import APPLY_MARK, run_lock_vars
from provision.hosts.ssh_config import SSH_ARGS
from provision.model.lock import Lock, LockGroup
from provision.model.settings import InstallSettings
from provision.resources import templates_dir

# Connection variables a user's inventory may give a host; everything else is not ours to copy.
CONNECTION_VARS = frozenset(
    {
        "ansible_host",
        "ansible_port",
        "ansible_user",
        "ansible_ssh_private_key_file",
        "ansible_connection",
        "ansible_python_interpreter",
        "ansible_ssh_common_args",
        "ansible_become",
        "ansible_become_user",
        "ansible_become_method",
        "ansible_ssh_extra_args",
        # provision's own (ssh_config.ssh_trust_vars), never a user's (planning drops those)
        "ansible_ssh_args",
        "ansible_host_key_checking",
    }
)


def group_name(index: int, group: LockGroup) -> str:
    name = group.name or f"group{index + 1}"
    name = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or f"group{index + 1}"
    if not name[0].isalpha():
        name = f"g_{name}"
    return name[:62]


@dataclass(frozen=True)
class RunVars:
    """The role variables a run dir holds, as rendered: what its YAML files say, kept in memory so
    that the run that wrote them never reads them back (the fleet cache takes this record).

    ``groups``: each lock group's Ansible name -> its ``group_vars/NAME.yml`` (the ``--set``
    values included); ``group_of``: each host -> its lock group's Ansible name; ``everyone``:
    ``group_vars/all.yml``; ``netrc``: the index logins of ``secrets.yml``'s netrc file ("" without).
    The values are plain YAML data (no tuples: ``yaml.safe_dump`` refuses them), so they equal
    what reading the files back would give.
    """

    groups: Mapping[str, Mapping[str, Any]]
    group_of: Mapping[str, str]
    everyone: Mapping[str, Any]
    netrc: str = field(default="", repr=False)


@dataclass(frozen=True)
class RenderedRun:
    """A rendered run dir: its files as {relative path: text} and the role variables they hold."""

    files: dict[str, str]
    vars: RunVars


def render_run(
    lock: Lock,
    hosts: Mapping[str, Mapping[str, Any]],
    install: InstallSettings,
    *,
    roles_path: str,
    overrides: Mapping[str, object] | None = None,
    user_groups: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    run: str | None = None,
) -> RenderedRun:
    """The run dir's files as {relative path: text}; pure, so golden tests compare it byte for byte.

    ``hosts`` maps each host of the lock to its connection variables (``ansible_host``, ...).
    ``user_groups`` are the user's inventory groups ({group: {"hosts": [...], "children": [...]}},
    :meth:`provision.hosts.inventory.Inventory.group_tree`): they go into inventory.yml beside the
    lock's groups, holding the lock's hosts only and no variables (the hosts' connection variables
    are already in the lock groups' entries, and every role variable stays in group_vars/).
    ``run`` is `up`'s run id (None for `plan --out`): the play then marks its processes with it,
    keeps the run's host lock across a reboot (``provision_run_lock``, read by the driver role's
    reboot tasks) and puts the credentials into a folder of the run's own.
    """
    import jinja2  # noqa: PLC0415 (jinja2 loads only when a run dir is rendered)

    install, creds = split_credentials(install)
    overrides = dict(overrides or {})
    check_overrides(overrides)
    if roles_path != BUNDLED_ROLES_PATH and not _CFG_PATH.match(roles_path):
        raise BadInput(f"roles path {roles_path!r} cannot go into ansible.cfg", "install provision under a plain path")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_templates())),
        variable_start_string="[[",
        variable_end_string="]]",
        block_start_string="[%",
        block_end_string="%]",
        comment_start_string="[#",
        comment_end_string="#]",
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    files: dict[str, str] = {}
    inventory: dict[str, Any] = {}
    names: list[str] = []
    prompts: list[dict[str, Any]] = []  # one vars_prompt per host with a sudo password
    role_vars: dict[str, dict[str, Any]] = {}
    for i, group in enumerate(lock.groups):
        name = group_name(i, group)
        if name in names:
            name = f"{name}_{i + 1}"
        names.append(name)
        members: dict[str, Any] = {}
        for host in group.hosts:
            check_host_name(str(host))
            members[str(host)] = _connection(str(host), hosts.get(str(host), {}))
            if any(hosts.get(str(host), {}).get(k) is not None for k in BECOME_PASSWORD_VARS):
                prompts.append(
                    {
                        "name": f"provision_become_password_{len(prompts) + 1}",
                        "prompt": become_prompt(str(host)),
                        "private": True,
                        "unsafe": True,
                    }
                )
                members[str(host)]["ansible_become_password"] = "{{ " + prompts[-1]["name"] + " }}"
        inventory[name] = {"hosts": members}
        data = {**group_vars(group, install, index_login=bool(creds.netrc)), **overrides}
        role_vars[name] = data
        files[f"group_vars/{name}.yml"] = env.get_template("data.yml.j2").render(
            what=f"role variables of host group {name} (from provision.lock)", body=dump(data)
        )
    if not names:
        raise BadInput("the lock has no host groups", "run `provision plan` with at least one host")
    all_vars: dict[str, Any] = {}
    environment = {"http_proxy": install.apt.proxy, "https_proxy": install.apt.proxy} if install.apt.proxy else {}
    # The mark on every process of the play (children inherit it): the next run's host lock waits
    # for processes that still carry it, left running by a controller killed mid-apply
    # (provision/hosts/runlock.py).
    # The run id, where there is one: the run's own re-take of its lock after a reboot does not
    # wait for its own play.
    environment[APPLY_MARK] = run or "1"
    # A folder per run: a second run on the host (up --check beside an apply) never writes or
    # removes the first one's credentials while its pip and apt read them.
    folder = f"{CREDENTIALS_DIR}-{run}" if run else CREDENTIALS_DIR
    all_vars["provision_environment"] = {**environment, **creds.environment(folder)}
    if run:
        all_vars["provision_run_lock"] = run_lock_vars(run)
    if creds:
        all_vars["provision_credentials_dir"] = folder
        files[SECRETS_FILE] = env.get_template("data.yml.j2").render(
            what="the credentials of install.pip / install.apt (0600: keep it private)",
            body=dump({"provision_credential_files": creds.files(), **creds.role_vars()}),
        )
    files["group_vars/all.yml"] = env.get_template("data.yml.j2").render(
        what="settings for every host", body=dump(all_vars)
    )
    # The user's values are checked for template markers; the one template added is ours: a
    # sudo password is never written here, only the name of the prompt that answers it.
    refuse_templates(
        {
            h: {k: v for k, v in c.items() if k != "ansible_become_password"}
            for g in inventory.values()
            for h, c in g["hosts"].items()
        },
        "inventory",
    )
    # after the check: the user's groups hold host names only (checked with the lock's hosts)
    inventory.update(_user_groups(user_groups or {}, {h for g in inventory.values() for h in g["hosts"]}, names))
    files["inventory.yml"] = env.get_template("data.yml.j2").render(
        what="the hosts of provision.lock, by host group"
        + ("; the inventory's own groups beside them" if user_groups else "")
        + ("; a sudo password comes from the play's prompt, never from a file" if prompts else ""),
        body=yaml.safe_dump({"all": {"children": inventory}}, sort_keys=False, default_flow_style=False, width=1000),
    )
    play: dict[str, Any] = {
        "name": "Provision NVIDIA GPU hosts",
        "hosts": ":".join(names),
        "become": True,
        "gather_facts": True,
        "environment": "{{ provision_environment }}",
    }
    if prompts:
        # ansible-runner answers these from memory (run_playbook's passwords); plain
        # `ansible-playbook site.yml` asks at the terminal. An environment variable would be
        # written to disk: ansible-runner copies its whole env into artifacts/<id>/command.
        play["vars_prompt"] = prompts
    if creds:
        play.update(_credentials_play())
    else:
        play["roles"] = [{"role": r} for r in ROLES]
    # the one string here that Ansible must template is ours: dump it without the marker check
    body = yaml.safe_dump([play], sort_keys=False, default_flow_style=False, width=1000)
    files["site.yml"] = env.get_template("site.yml.j2").render(body=body)
    nhosts = sum(len(g.hosts) for g in lock.groups)
    files["ansible.cfg"] = env.get_template("ansible.cfg.j2").render(
        roles_path=roles_path, forks=_forks(nhosts), ssh_args=SSH_ARGS
    )
    netrc = next((f["content"] for f in creds.files() if f["name"] == "netrc"), "")
    group_of = {h: name for name in names for h in inventory[name]["hosts"]}
    return RenderedRun(files, RunVars(role_vars, group_of, all_vars, netrc))


# The inventory variables that carry a host's sudo password (HostTarget.become_password).
BECOME_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")


def become_prompt(host: str) -> str:
    """The text the play prompts with for ``host``'s sudo password (vars_prompt appends ': ')."""
    return f"sudo password for {host}"


def become_answers(passwords: Mapping[str, str]) -> dict[str, str]:
    """{host: password} as ansible-runner's ``passwords``: {regex of the prompt: answer}."""
    return {rf"{re.escape(become_prompt(host))}:\s*$": pw for host, pw in passwords.items()}


SECRETS_FILE = "secrets.yml"


def _credentials_play() -> dict[str, Any]:
    """The play's body when the run has credentials: the roles inside a block whose ``always``
    removes the credentials from the host, also when a role fails (post_tasks would not run).

    The credential tasks are transient (the host ends as it started): never reported as changes,
    so a converged host still reports 0, and run in check mode too, so `up --check` reaches the
    same mirrors. ``no_log`` keeps the files' content out of the events and the runner's artifacts.
    """
    folder = "{{ provision_credentials_dir }}"
    transient = {"check_mode": False, "changed_when": False}
    place = [
        {
            "name": "Make the root-only folder for this run's credentials",
            "ansible.builtin.file": {
                "path": folder,
                "state": "directory",
                "owner": "root",
                "group": "root",
                "mode": "0700",
            },
            **transient,
        },
        {
            "name": "Write this run's credentials for pip and apt (root only; removed at the end of the play)",
            "ansible.builtin.copy": {
                "dest": folder + "/{{ item.name }}",
                "content": "{{ item.content }}",
                "owner": "root",
                "group": "root",
                "mode": "0600",
            },
            "loop": "{{ provision_credential_files }}",
            "loop_control": {"label": "{{ item.name }}"},
            "no_log": True,
            **transient,
        },
    ]
    roles = [{"name": f"Role {r}", "ansible.builtin.import_role": {"name": r}} for r in ROLES]
    remove = [
        {
            "name": "Remove this run's credentials from the host",
            "ansible.builtin.file": {"path": folder, "state": "absent"},
            **transient,
        }
    ]
    return {
        "vars_files": [SECRETS_FILE],
        "tasks": [
            {
                "name": "Apply the roles with this run's credentials on the host",
                "block": place + roles,
                "always": remove,
            }
        ],
    }


_GROUP = re.compile(r"^[A-Za-z0-9_.-]+$")  # provision.hosts.inventory takes no other group name


def _user_groups(
    groups: Mapping[str, Mapping[str, Sequence[str]]], lock_hosts: set[str], lock_groups: Sequence[str]
) -> dict[str, Any]:
    """The user's groups for inventory.yml: each with its hosts the lock has (a host left out by
    ``--limit`` or an unprobed one is not in the run) and its child groups that are kept."""
    kept: dict[str, list[str]] = {}
    for name, group in groups.items():
        if name in ("all", "ungrouped"):
            continue
        if not _GROUP.match(name):
            raise BadInput(f"inventory group {name!r} cannot go into the run dir", "use letters, digits, `_`, `-`, `.`")
        members = [h for h in group.get("hosts", ()) if h in lock_hosts]
        if not members:
            continue
        if name in lock_groups:
            # one name for both would give the lock group's role variables to all the user's hosts
            raise BadInput(
                f"inventory group {name!r} has the name of a lock group", "rename that group in the inventory"
            )
        kept[name] = members
    out: dict[str, Any] = {}
    for name, members in kept.items():
        children = [c for c in groups[name].get("children", ()) if c in kept]
        # a host of a child group is in the parent through it (members count hosts of children too)
        through = {h for c in children for h in kept[c]}
        body: dict[str, Any] = {}
        if direct := [h for h in members if h not in through]:
            body["hosts"] = dict.fromkeys(direct)
        if children:
            body["children"] = {c: {} for c in children}
        out[name] = body
    return out


def _forks(hosts: int) -> int:
    # One fork per host up to 50: most of a run is waiting on apt/pip on the hosts, not on the controller.
    return max(5, min(50, hosts))


def _connection(host: str, given: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in CONNECTION_VARS:
            continue
        if key == "ansible_port":
            try:
                out[key] = int(value)
            except (TypeError, ValueError):
                raise BadInput(f"host {host}: ansible_port {value!r} is not a number", "give a port number") from None
        elif isinstance(value, bool):
            out[key] = value
        else:
            out[key] = _check_text(str(value), f"host {host}: {key}")
    return out


def _templates() -> Path:
    return templates_dir()
