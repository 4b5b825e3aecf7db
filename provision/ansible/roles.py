"""The roles' interface: which roles site.yml runs and in what order, where they live, their
argument specs (meta/argument_specs.yml), and the check of role-variable overrides (``--set``)
against those specs.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from provision.ansible.role_vars import LOCK_OWNED
from provision.ansible.settings import CREDENTIAL_VARS
from provision.errors import BadInput
from provision.model.settings import check_url, split_credential
from provision.resources import playbooks_dir

# The roles in the order site.yml runs them (docs/explanation/design.md).
ROLES: tuple[str, ...] = (
    "preflight",
    "nvidia_driver",
    "fabric_manager",
    "cuda_toolkit",
    "cudnn",
    "python_env",
    "frameworks",
    "container_toolkit",
    "dcgm",
    "verify",
    "health",
)


# Where `plan` copies the roles inside its run dir, and the roles_path its ansible.cfg names:
# relative, which Ansible reads relative to the ansible.cfg that says it, so the folder can be
# committed or copied to another machine and run there with plain ansible-playbook.
BUNDLED_ROLES_PATH = "roles"


def default_roles_path() -> str:
    return str(playbooks_dir() / "roles")


def check_overrides(overrides: Mapping[str, object]) -> None:
    """Role variables set on top of the rendered ones (air-gapped mirrors, tests).

    Checked against the roles' argument specs, their documented interface, before any host is
    touched: Ansible would check the same types, but only when the play reaches the role, after
    the roles before it have changed the host.
    """
    specs = role_argument_specs()
    for name, value in overrides.items():
        spec = specs.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(specs), n=3, cutoff=0.85)
            hint = f"did you mean {', '.join(close)}?" if close else "use a name from a role's defaults/main.yml"
            raise BadInput(f"{name!r} is not a role variable", hint)
        problem = _spec_problem(value, spec)
        if problem:
            raise BadInput(
                f"--set {name}: {problem}",
                "see the role's variables on the docs' Reference > Roles page"
                " (`make docs` builds it: site/reference/roles/index.html)",
            )
        for url in set_urls(name, value):
            if not (name == "frameworks_find_links" and url.startswith("/")):  # a local wheel folder
                check_url(url, f"--set {name}: the URL")


# The role variables that hold URLs (their argument specs' descriptions say so), by where in the
# value: the string itself, each list item, or these keys of each list entry. A --set of one is
# checked URL by URL (check_overrides), and refused with a login in it (check_user_sets).
_URL_STRINGS = frozenset(
    {
        "nvidia_driver_debian_mirror",
        "nvidia_driver_debian_security_mirror",
        "python_env_python_mirror",
        "python_env_python_downloads_json",
        "frameworks_index_url",
    }
)
_URL_LISTS = frozenset({"frameworks_extra_index_urls", "frameworks_find_links"})
_URL_ENTRY_KEYS = {"frameworks_installs": ("index_url",), "frameworks_locked": ("index_url",)}
_REPOSITORY_KEYS = ("url", "key_url")


def set_urls(name: str, value: object) -> list[str]:
    """The URLs in a role variable's value ("" is a variable's own "none" and no URL)."""
    found: Sequence[object]
    if name in _URL_STRINGS:
        found = [value]
    elif name in _URL_LISTS:
        found = value if isinstance(value, list) else str(value).split(",")  # Ansible splits a str at ","
    else:
        keys = _URL_ENTRY_KEYS.get(name) or (_REPOSITORY_KEYS if name.endswith("_repositories") else ())
        found = [e.get(k) for e in (value if isinstance(value, list) else []) if isinstance(e, Mapping) for k in keys]
    return [str(u) for u in found if u not in (None, "")]


# The role variables plan writes per host into the run dir's host_vars/ (the health role's spec
# and program files: provision.fleet.health_spec.host_vars).
PER_HOST_VARS = frozenset({"health_spec", "health_sources"})


def check_user_sets(overrides: Mapping[str, object]) -> None:
    """What `plan` and `up` refuse of ``--set`` beyond the argument specs (render, which tests and
    the integration harness call with any role variable, checks only those).

    A variable the lock owns (:data:`provision.ansible.role_vars.LOCK_OWNED`) would make the run
    dir install what provision.lock does not say. A string variable that YAML read as a float
    (``--set nvidia_driver_kernel=6.10`` is 6.1) has lost the text typed: quote it.
    """

    specs = role_argument_specs()
    for name, value in overrides.items():
        instead = LOCK_OWNED.get(name)
        if instead is not None:
            raise BadInput(f"--set {name}: the lock decides this variable, not --set", f"use {instead}")
        if name in PER_HOST_VARS:  # host_vars/ (plan writes them) win over --set's group_vars: it would do nothing
            raise BadInput(
                f"--set {name}: plan builds it for each host from the lock and the host's probe, not --set",
                "leave it out; --set health_enabled=false leaves the health role out",
            )
        if name in CREDENTIAL_VARS:  # --set would write it into group_vars
            raise BadInput(
                f"--set {name}: a login is never given on the command line",
                "give it in the URL of install.apt.mirror (provision keeps it in the run's 0600 secrets.yml)",
            )
        for url in set_urls(name, value):
            bare, login = split_credential(url)
            if login is not None:
                raise BadInput(
                    f"--set {name}: {bare} is given with a login, which would be written into group_vars",
                    "give the mirror in provision.yaml's install: section (its logins go to the run's 0600 "
                    "secrets.yml), or keep the login in the hosts' own apt auth.conf.d / netrc",
                )
        spec = specs.get(name) or {}
        if isinstance(value, float) and spec.get("type", "str") in ("str", "path"):
            raise BadInput(
                f"--set {name}: {value!r} is a number; YAML drops a version's trailing zeros (6.10 becomes 6.1)",
                f"""quote it as you mean it, e.g. --set '{name}="6.10"'""",
            )


_KIND_NAMES = {
    "bool": "a boolean",
    "int": "an integer",
    "list": "a list",
    "dict": "a mapping",
    "str": "a string",
    "path": "a path",
}
# The strings Ansible's argument spec validation takes as booleans (module_utils.parsing.convert_bool).
_BOOL_STRINGS = {"y", "yes", "on", "1", "true", "t", "n", "no", "off", "0", "false", "f"}


def _spec_problem(value: object, spec: Mapping[str, Any]) -> str | None:
    """Why ``value`` would fail the role's argument spec (the checks Ansible makes), or None."""
    kind = spec.get("type", "str")
    if value is None or kind == "raw":
        return None
    scalar = isinstance(value, (str, int, float, bool))
    ok = {
        "bool": isinstance(value, bool) or (isinstance(value, (str, int)) and str(value).lower() in _BOOL_STRINGS),
        "int": (isinstance(value, int) and not isinstance(value, bool))
        or (isinstance(value, str) and re.fullmatch(r"-?\d+", value) is not None),
        "list": isinstance(value, (list, str)),
        "dict": isinstance(value, dict),
    }.get(kind, scalar)  # str, path: any scalar (Ansible converts it)
    if not ok:
        return f"{value!r} is not {_KIND_NAMES.get(kind, kind)}"
    choices = spec.get("choices")
    if choices and value not in choices:
        return f"{value!r} is not one of {', '.join(map(str, choices))}"
    return None


@functools.cache
def role_argument_specs() -> dict[str, dict[str, Any]]:
    """Every role variable's argument spec (meta/argument_specs.yml), by variable name."""
    out: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        path = Path(default_roles_path()) / role / "meta" / "argument_specs.yml"
        out.update(yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"])
    return out
