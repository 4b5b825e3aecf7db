"""Which hosts to reach and how: HOST arguments and Ansible inventories (INI and YAML).

Everything here is pure: a malformed host string, an invalid host name or an inventory that does
not parse is :class:`~provision.errors.BadInput` (exit 2) before any host is contacted. The
result is a list of :class:`HostTarget`, the one description of a host that the transports,
the renderer and the reports share.

Only the parts of Ansible's inventory formats that describe hosts are read (groups, children,
vars, host ranges such as ``gpu[01:08]``); inventory plugins and scripts are not run. As Ansible
reads them: a folder given as the inventory is every file in it (sorted, recursively, without the
names Ansible ignores), and ``group_vars/`` and ``host_vars/`` beside the inventory file (inside
the folder) add their variables with Ansible's precedence.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import BadInput
from provision.files import load_yaml

HOST_FORMAT_HINT = "write HOST as [user@]name[:port], e.g. deploy@gpu1.example.com:2222"
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")
_RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
# Variables whose values must never be printed (sudo / SSH passwords).
SECRET_VARS = frozenset(
    {
        "ansible_become_password",
        "ansible_become_pass",
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_sudo_pass",
        "ansible_sudo_password",
    }
)

# The connections provision speaks: OpenSSH (whose host key checks the probe's paramiko matches,
# and whose trust the run dir pins) and the local machine. "smart" is ssh unless ssh lacks
# ControlPersist (ansible-core playbook/attribute.py ConnectionFieldAttribute); the run dir's
# inventory sets ssh for every SSH host. Every other plugin is refused: Ansible's paramiko one
# (also what "persistent" becomes) asks on a terminal about an unknown host key (paramiko_ssh.py
# MyAddPolicy), which hung `up`; docker, winrm and the like reach something the probe never saw.
SSH_CONNECTIONS = frozenset({"ssh", "ansible.builtin.ssh", "smart"})
LOCAL_CONNECTIONS = frozenset({"local", "ansible.builtin.local"})


@dataclass(frozen=True)
class HostTarget:
    """One host to reach: its label, where it is, and the connection settings that were given.

    ``user``, ``port`` and ``key_file`` are ``None`` when not given, so that ``~/.ssh/config``
    can fill them in (explicit values win, as with ``ssh -l``/``-p``/``-i``).
    """

    name: str
    address: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    local: bool = False
    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def become_password(self) -> str | None:
        for key in ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass"):
            value = self.vars.get(key)
            if value is not None:
                return str(value)
        return None

    def public_vars(self) -> dict[str, Any]:
        """The host's variables with secrets masked (for reports and debugging)."""
        return {k: ("********" if k in SECRET_VARS else v) for k, v in self.vars.items()}


LOCALHOST = HostTarget(name="localhost", address="localhost", local=True)


def is_valid_hostname(name: str) -> bool:
    """An IPv4/IPv6 address or a DNS name (RFC 1123 labels; underscores tolerated as ssh does)."""
    if not name or len(name) > 253:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if all(label.isdigit() for label in labels):  # 999.1.1.1 is not a name either
        return False
    return all(_LABEL.match(label) for label in labels)


def _check_name(name: str, what: str, hint: str = HOST_FORMAT_HINT) -> str:
    if not is_valid_hostname(name):
        raise BadInput(f"invalid host name `{name}` in {what}", hint)
    return name


def _check_port(value: Any, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise BadInput(f"invalid port `{value}` in {what}", "a port is a number from 1 to 65535")
    return int(text)


def _check_user(user: str, what: str) -> str:
    if not _USER.match(user):
        raise BadInput(f"invalid user name `{user}` in {what}", HOST_FORMAT_HINT)
    return user


def parse_host(arg: str) -> HostTarget:
    """``[user@]name[:port]`` (``[v6addr]:port`` for IPv6) -> a target; BadInput when malformed."""
    what = f"host `{arg}`"
    text = arg.strip()
    if not text or any(c.isspace() for c in text):
        raise BadInput(f"malformed host `{arg}`", HOST_FORMAT_HINT)
    user: str | None = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        _check_user(user, what)
    port: int | None = None
    if text.startswith("["):  # [2001:db8::1]:2222
        inner, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise BadInput(f"malformed host `{arg}`", HOST_FORMAT_HINT)
        name = inner
        if rest:
            port = _check_port(rest[1:], what)
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            raise BadInput(f"malformed host `{arg}`: `[...]` holds an IPv6 address", HOST_FORMAT_HINT) from None
    elif text.count(":") > 1:  # a bare IPv6 address, no port
        name = text
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            raise BadInput(f"malformed host `{arg}`", HOST_FORMAT_HINT) from None
    else:
        name, sep, port_text = text.partition(":")
        if sep:
            port = _check_port(port_text, what)
    if not name:
        raise BadInput(f"malformed host `{arg}`: no host name", HOST_FORMAT_HINT)
    _check_name(name, what)
    return HostTarget(name=name, address=name, user=user, port=port)


def parse_hosts(args: Iterable[str]) -> list[HostTarget]:
    targets = [parse_host(a) for a in args]
    _reject_duplicates(targets, "the HOST arguments")
    return targets


def _reject_duplicates(targets: list[HostTarget], where: str) -> None:
    seen: set[str] = set()
    for t in targets:
        if t.name in seen:
            raise BadInput(f"host `{t.name}` appears twice in {where}", "name each host once")
        seen.add(t.name)


# ---------------------------------------------------------------------------------------------
# Inventories


@dataclass
class _Group:
    name: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> its own vars
    vars: dict[str, Any] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)


class _Inventory:
    def __init__(self, source: str) -> None:
        self.source = source
        self.groups: dict[str, _Group] = {"all": _Group("all"), "ungrouped": _Group("ungrouped")}
        self.host_order: list[str] = []
        self.vars_cache: dict[tuple[str, str], dict[str, Any]] = {}

    def group(self, name: str) -> _Group:
        if not re.match(r"^[A-Za-z0-9_.-]+$", name):
            raise BadInput(
                f"invalid group name `{name}` in {self.source}", "group names are letters, digits, `_`, `-` and `.`"
            )
        return self.groups.setdefault(name, _Group(name))

    def add_host(self, group: str, pattern: str, host_vars: Mapping[str, Any]) -> None:
        for host in expand_host_pattern(pattern, self.source):
            if host not in self.host_order:
                self.host_order.append(host)
            self.group(group).hosts.setdefault(host, {}).update(host_vars)

    def targets(self, base: Path | None = None) -> list[HostTarget]:
        """The hosts with their merged vars; ``base``: the folder whose group_vars/host_vars apply."""
        parents: dict[str, set[str]] = {}
        for g in self.groups.values():
            for child in g.children:  # both parsers define a child group when they meet it
                parents.setdefault(child, set()).add(g.name)
        depth = {name: self._depth(name, parents, ()) for name in self.groups}
        result: list[HostTarget] = []
        for host in self.host_order:
            direct = [g for g in self.groups.values() if host in g.hosts]
            names = set()
            todo = [g.name for g in direct]
            while todo:
                name = todo.pop()
                if name not in names:
                    names.add(name)
                    todo.extend(parents.get(name, ()))
            names.discard("all")
            if not (names - {"ungrouped"}):
                names = {"ungrouped"}
            else:
                names.discard("ungrouped")
            # Ansible's precedence (ansible-core's VariableManager.get_vars with its default
            # VARIABLE_PRECEDENCE): the inventory's vars of all, then of the host's groups (parent
            # before child: by depth, then name), then group_vars/all, then group_vars/<group> in
            # the same order, then the inventory's host vars, then host_vars/<host>.
            ordered = sorted(names, key=lambda n: (depth[n], n))
            merged: dict[str, Any] = dict(self.groups["all"].vars)
            for name in ordered:
                merged.update(self.groups[name].vars)
            if base is not None:
                for name in ("all", *ordered):
                    merged.update(self._vars_files(base, "group_vars", name))
            for g in direct:
                merged.update(g.hosts[host])
            if base is not None:
                merged.update(self._vars_files(base, "host_vars", host))
            result.append(self._target(host, merged, tuple(sorted(names))))
        return result

    def _vars_files(self, base: Path, kind: str, name: str) -> dict[str, Any]:
        """``kind/name`` beside the inventory, read once (a group's file serves all its hosts)."""
        key = (kind, name)
        if key not in self.vars_cache:
            merged: dict[str, Any] = {}
            for path in vars_files(base / kind, name):
                merged.update(_read_vars(path))
            self.vars_cache[key] = merged
        return self.vars_cache[key]

    def _depth(self, name: str, parents: dict[str, set[str]], path: tuple[str, ...]) -> int:
        if name in path:
            raise BadInput(f"group `{name}` is its own ancestor in {self.source}", "remove the cycle of :children")
        ups = parents.get(name, set()) - {"all"}
        return 1 + max((self._depth(p, parents, (*path, name)) for p in ups), default=0)

    def _target(self, host: str, hvars: dict[str, Any], groups: tuple[str, ...]) -> HostTarget:
        what = f"host `{host}` of {self.source}"
        address = str(hvars.get("ansible_host", hvars.get("ansible_ssh_host", host)))
        _check_name(address, what, "ansible_host must be a host name or an IP address")
        user = hvars.get("ansible_user", hvars.get("ansible_ssh_user"))
        port = hvars.get("ansible_port", hvars.get("ansible_ssh_port"))
        key = hvars.get("ansible_ssh_private_key_file", hvars.get("ansible_private_key_file"))
        for secret in sorted(SECRET_VARS & hvars.keys()):
            # provision's own sudo and ssh use the value as written: a template would be sent as the password
            if any(mark in str(hvars[secret]) for mark in ("{{", "{%")):
                raise BadInput(
                    f"{secret} of {what} is a Jinja template, which provision does not evaluate",
                    "write the password itself (in a vars file kept out of git) or give the user passwordless sudo",
                )
        connection = str(hvars.get("ansible_connection", "ssh"))
        if connection not in SSH_CONNECTIONS | LOCAL_CONNECTIONS:
            raise BadInput(
                f"{what}: ansible_connection `{connection}` is not supported",
                "remove it (provision connects over OpenSSH and checks host keys as it does) or set ssh or local",
            )
        return HostTarget(
            name=host,
            address=address,
            user=_check_user(str(user), what) if user is not None else None,
            port=_check_port(port, what) if port is not None else None,
            key_file=str(key) if key is not None else None,
            local=connection in LOCAL_CONNECTIONS,
            groups=groups,
            vars=hvars,
        )


def expand_host_pattern(pattern: str, source: str) -> list[str]:
    """``gpu[01:03].example.com`` -> gpu01..gpu03 (Ansible's numeric and alphabetic ranges)."""
    match = _RANGE.search(pattern)
    if match is None:
        return [_check_name(pattern, source, "host names are DNS names or IP addresses")]
    start, end, step_text = match.group(1), match.group(2), match.group(3)
    step = int(step_text) if step_text else 1
    head, tail = pattern[: match.start()], pattern[match.end() :]
    if start.isdigit() and end.isdigit():
        width = len(start) if start.startswith("0") else 0
        values = [str(i).zfill(width) for i in range(int(start), int(end) + 1, step)]
    elif len(start) == 1 and len(end) == 1 and start.isalpha() and end.isalpha():
        values = [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    else:
        raise BadInput(f"invalid host range `{match.group(0)}` in {source}", "write ranges as [01:08] or [a:f]")
    if not values:
        raise BadInput(f"empty host range `{match.group(0)}` in {source}", "the range's start must not exceed its end")
    return [h for v in values for h in expand_host_pattern(head + v + tail, source)]


def _ini_value(text: str) -> Any:
    # Ansible's INI parser turns Python literals into values (ast.literal_eval: ports become ints,
    # True a bool, while `true` is no Python literal and stays the string "true"); keep it simple
    # and safe: integers and the two booleans, the rest as strings.
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text in ("True", "False"):
        return text == "True"
    return text


def _parse_ini(text: str, inv: _Inventory) -> None:
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{inv.source}:{number}"
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            m = re.fullmatch(r"\[([^\]:\s]+)(?::(vars|children))?\]", line)
            if not m:
                raise BadInput(
                    f"inventory does not parse: bad section header `{line}` at {where}",
                    "sections are [group], [group:vars] or [group:children]",
                )
            section, kind = m.group(1), m.group(2) or "hosts"
            inv.group(section)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise BadInput(f"inventory does not parse at {where}: {exc}", "check the quotes on that line") from None
        if not words:
            continue
        if kind == "children":
            if len(words) != 1:
                raise BadInput(f"inventory does not parse at {where}: `{line}`", "list one child group per line")
            inv.group(words[0])
            inv.group(section).children.append(words[0])
        elif kind == "vars":
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise BadInput(
                    f"inventory does not parse at {where}: `{line}` is not key=value", "write group vars as key=value"
                )
            value = value.strip()
            if value[:1] in ("'", '"'):
                value = " ".join(shlex.split(value, comments=True))
            inv.group(section).vars[key.strip()] = _ini_value(value)
        else:
            host_vars: dict[str, Any] = {}
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep or not key:
                    raise BadInput(
                        f"inventory does not parse at {where}: `{word}` is not key=value",
                        "write host vars as name key=value ...",
                    )
                host_vars[key] = _ini_value(value)
            pattern = words[0]
            if pattern.count(":") == 1 and "[" not in pattern:
                pattern, _, port = pattern.partition(":")  # `host:2222` as Ansible allows
                host_vars.setdefault("ansible_port", _check_port(port, where))
            inv.add_host(section, pattern, host_vars)


def _parse_yaml(data: Any, inv: _Inventory) -> None:
    if not isinstance(data, dict):
        raise BadInput(
            f"inventory does not parse: {inv.source} is not a mapping of groups",
            "a YAML inventory starts with `all:` (see Ansible's inventory docs)",
        )

    def walk(name: str, body: Any) -> None:
        group = inv.group(name)
        if body is None:
            return
        if not isinstance(body, dict) or set(body) - {"hosts", "vars", "children"}:
            raise BadInput(
                f"inventory does not parse: group `{name}` in {inv.source} must be a mapping with hosts/vars/children",
                "indent hosts under `hosts:` and vars under `vars:`",
            )
        for key in ("hosts", "vars", "children"):
            if body.get(key) is not None and not isinstance(body[key], dict):
                raise BadInput(
                    f"inventory does not parse: `{name}.{key}` in {inv.source} is not a mapping",
                    f"write `{key}:` as a mapping of names",
                )
        for host, host_vars in (body.get("hosts") or {}).items():
            if host_vars is not None and not isinstance(host_vars, dict):
                raise BadInput(
                    f"inventory does not parse: vars of host `{host}` in {inv.source} are not a mapping",
                    "write `host: {ansible_host: ...}` or `host:` with nothing after it",
                )
            inv.add_host(name, str(host), host_vars or {})
        group.vars.update(body.get("vars") or {})
        for child, child_body in (body.get("children") or {}).items():
            group.children.append(str(child))
            walk(str(child), child_body)

    for name, body in data.items():
        walk(str(name), body)


# Ansible's defaults (ansible-core 2.19's config/base.yml and constants.py): the extensions a
# folder inventory skips (INVENTORY_IGNORE_EXTS: REJECT_EXTS + .orig, .cfg, .retry), the names it
# always skips (inventory/manager.py IGNORED_ALWAYS, besides dot files), and the extensions of a
# vars file (YAML_FILENAME_EXTENSIONS, tried after the bare name).
IGNORED_EXTENSIONS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
_IGNORED_NAMES = ("host_vars", "group_vars", "vars_plugins")
VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def inventory_files(folder: Path) -> list[Path]:
    """The files of a folder inventory in the order Ansible parses them (sorted, depth first)."""
    out: list[Path] = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or name in _IGNORED_NAMES or name.endswith(IGNORED_EXTENSIONS):
            continue
        path = folder / name
        out.extend(inventory_files(path) if path.is_dir() else [path])
    return out


def vars_files(folder: Path, name: str) -> list[Path]:
    """``folder/name`` as Ansible's DataLoader.find_vars_files finds it: the first of name,
    name.yml, name.yaml, name.json that exists; a folder is all its vars files, sorted."""
    if name in (".", ".."):  # a group may be named so; its vars are not the folder above
        return []
    for ext in VARS_EXTENSIONS:
        path = folder / f"{name}{ext}"
        if path.is_dir():
            return _vars_folder(path)
        if path.exists():
            return [path]
    return []


def _vars_folder(folder: Path) -> list[Path]:
    out: list[Path] = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or name.endswith("~"):  # hidden files and backups, as Ansible skips them
            continue
        path, ext = folder / name, os.path.splitext(name)[1]
        if path.is_dir() and not ext:
            out.extend(_vars_folder(path))
        elif path.is_file() and ext in VARS_EXTENSIONS:
            out.append(path)
    return out


def _read_vars(path: Path) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    text = _read(path, "vars file")
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise BadInput(
            f"vars file {path} is vault-encrypted",
            "provision does not decrypt Ansible Vault: keep these vars elsewhere",
        )
    try:
        data = load_yaml(text, f"vars file {path}")
    except yaml.YAMLError as exc:
        if "!vault" in str(exc):
            raise BadInput(
                f"vars file {path} holds a vault-encrypted value",
                "provision does not decrypt Ansible Vault: keep these vars elsewhere",
            ) from None
        raise BadInput(f"vars file {path} is not valid YAML", "fix the YAML (indentation, colons)") from None
    if data is None:  # an empty file, as Ansible ignores it
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"vars file {path} is not a mapping of variables", "write it as `name: value` lines")
    return {str(k): v for k, v in data.items()}


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise BadInput(f"{what} not found: {path}", "give the path of an inventory file or folder") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise BadInput(
            f"cannot read {what} {path}: {exc.__class__.__name__}", "give a readable INI or YAML inventory"
        ) from None


def _parse_file(path: Path, inv: _Inventory) -> None:
    """One inventory file, YAML or INI. Ansible tries its YAML plugin first on a name with no
    extension too and falls back to INI when that gives no mapping: so does this."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    inv.source = str(path)
    text = _read(path, "inventory")
    data: Any = None
    if path.suffix in (".yml", ".yaml", ".json") or text.lstrip().startswith(("all:", "---")):
        try:
            data = load_yaml(text, f"inventory {path}")
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise BadInput(
                f"inventory does not parse: {path}{at} is not valid YAML", "fix the YAML (indentation, colons)"
            ) from None
        data = data or {}
    elif not path.suffix:
        try:
            data = load_yaml(text, f"inventory {path}")
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict):  # an INI file reads as a string, a list or not at all
            data = None
    if data is None:
        _parse_ini(text, inv)
        return
    if isinstance(data, dict) and isinstance(data.get("plugin"), str):
        raise BadInput(
            f"inventory {path} configures the plugin {data['plugin']}: provision runs no inventory plugin",
            f"write its hosts out once: ansible-inventory -i {path} --list -y > hosts.yml",
        )
    _parse_yaml(data, inv)


@dataclass(frozen=True)
class Inventory:
    """An inventory as read: its hosts, and its groups (for the run dir's inventory.yml)."""

    targets: list[HostTarget]
    children: Mapping[str, tuple[str, ...]]  # group -> its child groups, as the inventory has them

    def group_tree(self) -> dict[str, dict[str, list[str]]]:
        """The user's groups (not ``all``/``ungrouped``): each with every host in it (through
        children too) and its child groups, in the inventory's host order."""
        tree: dict[str, dict[str, list[str]]] = {}
        for t in self.targets:
            for name in t.groups:
                if name != "ungrouped":
                    tree.setdefault(name, {"hosts": [], "children": list(self.children.get(name, ()))})
                    tree[name]["hosts"].append(t.name)
        return tree


def load_inventory(path: Path | str) -> list[HostTarget]:
    """Hosts of an Ansible inventory (an INI or YAML file, or a folder of them), with merged vars
    (group_vars/ and host_vars/ beside the file, or in the folder) and their groups."""
    return read_inventory(path).targets


def read_inventory(path: Path | str) -> Inventory:
    """:func:`load_inventory` with the inventory's group hierarchy."""
    path = Path(path)
    source = str(path)
    if path.is_dir():
        files = inventory_files(path)
        if not files:
            raise BadInput(f"inventory folder {source} holds no inventory file", "add an INI or YAML inventory to it")
    elif not path.exists():
        raise BadInput(f"inventory not found: {source}", "give the path of an inventory file or folder")
    else:
        files = [path]
    inv = _Inventory(source)
    for file in files:
        _parse_file(file, inv)
    inv.source = source
    targets = inv.targets(path if path.is_dir() else path.parent)
    if not targets:
        raise BadInput(f"inventory {source} lists no hosts", "add at least one host")
    children = {g.name: tuple(dict.fromkeys(g.children)) for g in inv.groups.values() if g.children}
    return Inventory(targets, children)
