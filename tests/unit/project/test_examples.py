"""The example inventories (inventory/) and provision.yaml files (examples/) the README and the docs
show: each is read by the real tools and planned, so an example that stops working fails here
rather than in a reader's hands.

- Every inventory (each file, and each folder as a whole) is read by the real `ansible-inventory
  --list` and by provision's own loader, alike (tests/ansible_inventory.py), and `provision plan -i`
  takes it; what each one is there to show is asserted on its content.
- Every examples/*.yaml is planned with `provision plan -c FILE --assume ...` with the network
  refused (an --assume plan reaches nothing, mirrors included), and the plan holds what the file
  asks for: the lock's stack against the file's stack:, the run dir's role variables against its
  install:.
- The README shows inventory/ssh-hosts.ini and examples/ssh-fleet.yaml inline: those blocks are the
  files.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from provision.config import Config, load_config
from provision.hosts.inventory import HostTarget, inventory_files, load_inventory
from provision.hosts.ssh_config import resolve_settings
from provision.ids import is_run_id
from tests.ansible_inventory import same_as_ansible
from tests.cli_run import OFFLINE_MARK, provision

REPO = Path(__file__).resolve().parents[3]
INVENTORY = REPO / "inventory"
EXAMPLES = REPO / "examples"
README = REPO / "README.md"
# RFC 5737's documentation networks: no example may name a real machine.
DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


def _inventories() -> list[Path]:
    """Each inventory file (folders searched as Ansible searches a folder inventory) and each
    folder at the top of inventory/ as a whole (a directory inventory). Not the inventories
    `provision up --cloud` writes there when run in the repository root (ec2-<run id>.yml)."""
    folders = [p for p in INVENTORY.iterdir() if p.is_dir() and not p.name.startswith(".")]
    files = [p for p in inventory_files(INVENTORY) if not (p.name.startswith("ec2-") and is_run_id(p.stem[4:]))]
    return sorted([*files, *folders])


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


INVENTORIES = _inventories()
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def _by_name(path: Path) -> dict[str, HostTarget]:
    return {t.name: t for t in load_inventory(path)}


# ---------------------------------------------------------------------------------------------
# inventory/


def test_the_inventories_the_docs_name_are_there() -> None:
    names = {p.name for p in INVENTORY.iterdir()}
    assert {"localhost.ini", "ssh-hosts.ini", "sudo-user.ini", "fleet", "README.md"} <= names
    assert (INVENTORY / "fleet" / "group_vars").is_dir() and (INVENTORY / "fleet" / "host_vars").is_dir()


def test_the_readme_says_what_each_inventory_shows() -> None:
    text = (INVENTORY / "README.md").read_text()
    for path in (p for p in INVENTORIES if p.parent == INVENTORY):
        shown = f"`{path.name}/`" if path.is_dir() else f"`{path.name}`"
        assert shown in text, f"inventory/README.md has no line for {shown}"


@pytest.mark.parametrize("path", INVENTORIES, ids=_id)
def test_ansible_and_provision_read_the_inventory_alike(path: Path, tmp_path: Path) -> None:
    targets = load_inventory(path)
    listing = same_as_ansible(path, targets, tmp_path)
    assert listing["_meta"]["hostvars"], f"{path} lists no hosts"
    for t in targets:  # documentation addresses only
        if not t.local:
            address = ipaddress.ip_address(t.address)
            assert any(address in net for net in DOC_NETS), f"{t.name}: {t.address} is no documentation address"


@pytest.mark.parametrize("path", INVENTORIES, ids=_id)
def test_plan_takes_the_inventory(path: Path, tmp_path: Path) -> None:
    r = provision(
        "plan",
        "-i",
        str(path),
        "--assume",
        "os=ubuntu-24.04,gpu=L4:1",
        "--out",
        "run",
        "--json",
        cwd=tmp_path,
        offline=True,
    )
    assert r.returncode == 0, r.stderr
    assert OFFLINE_MARK not in r.stderr
    assert sorted(h["host"] for h in json.loads(r.stdout)["hosts"]) == sorted(_by_name(path))


def test_ssh_hosts_is_two_servers_logged_in_as_ubuntu() -> None:
    hosts = _by_name(INVENTORY / "ssh-hosts.ini")
    assert [(t.name, t.address, t.user, t.port, t.groups) for t in hosts.values()] == [
        ("gpu1", "192.0.2.11", "ubuntu", None, ("gpu",)),
        ("gpu2", "192.0.2.12", "ubuntu", None, ("gpu",)),
    ]


def test_localhost_is_the_local_machine_without_ssh() -> None:
    [target] = load_inventory(INVENTORY / "localhost.ini")
    assert target.local and target.name == "localhost" and target.user is None


def test_sudo_user_becomes_root_with_and_without_a_password(tmp_path: Path) -> None:
    hosts = _by_name(INVENTORY / "sudo-user.ini")
    assert {t.user for t in hosts.values()} == {"deploy"}
    assert all(t.vars["ansible_become_method"] == "sudo" for t in hosts.values())
    assert hosts["gpu3"].become_password is None  # passwordless sudo
    assert hosts["gpu4"].become_password == "CHANGE-ME"  # the placeholder the comment explains
    assert hosts["gpu4"].public_vars()["ansible_become_password"] == "********"
    # the password reaches no file of the plan: the run dir's play prompts for it instead
    r = provision(
        "plan",
        "-i",
        str(INVENTORY / "sudo-user.ini"),
        "--assume",
        "os=ubuntu-24.04,gpu=L4:1",
        "--out",
        "run",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    written = "".join(p.read_text() for p in (tmp_path / "run").rglob("*.yml"))
    assert "CHANGE-ME" not in written and "provision_become_password_1" in written


def test_fleet_folder_merges_group_vars_and_host_vars(tmp_path: Path) -> None:
    hosts = _by_name(INVENTORY / "fleet")
    assert list(hosts) == ["a100-01", "a100-02", "h100-01", "h100-02"]  # the range expanded
    assert {t.user for t in hosts.values()} == {"ubuntu"}  # group_vars/all.yml
    a100 = hosts["a100-01"]
    assert (a100.address, a100.groups, a100.key_file) == ("192.0.2.21", ("a100",), "~/.ssh/fleet_ed25519")
    assert hosts["a100-02"].address == "192.0.2.22"  # host_vars/
    assert (hosts["h100-01"].port, hosts["h100-01"].key_file) == (2222, "~/.ssh/fleet_ed25519")
    assert hosts["h100-02"].key_file == "~/.ssh/h100-02_ed25519"  # host_vars over group_vars
    # what the SSH connection makes of it (no host contacted; no ~/.ssh/config read)
    no_config = tmp_path / "no-ssh-config"
    jumped = resolve_settings(a100, ssh_config=no_config)
    assert (jumped.hostname, jumped.port, jumped.proxy_jump) == ("192.0.2.21", 22, "jump@198.51.100.5")
    direct = resolve_settings(hosts["h100-02"], ssh_config=no_config)
    assert (direct.hostname, direct.port, direct.proxy_jump) == ("198.51.100.32", 2222, None)
    assert direct.key_files[0].endswith("/.ssh/h100-02_ed25519")


# ---------------------------------------------------------------------------------------------
# examples/

# The host each example is planned for (--assume) and, for one meant for an inventory, that
# inventory. An example without an entry fails: say what it is for when adding it.
PLANS: dict[str, tuple[str, ...]] = {
    "ssh-fleet.yaml": ("-i", str(INVENTORY / "ssh-hosts.ini"), "--assume", "os=ubuntu-24.04,gpu=A100-80GB:8"),
    "workstation.yaml": ("--assume", "os=ubuntu-24.04,gpu=RTX-4090:1,name=workstation"),
    "tensorflow-jax.yaml": ("--assume", "os=ubuntu-24.04,gpu=L40S:4,name=trainer"),
    "pinned.yaml": ("-i", str(INVENTORY / "fleet"), "--assume", "os=ubuntu-24.04,gpu=H100-SXM:8"),
    "air-gapped.yaml": ("--assume", "os=ubuntu-24.04,gpu=L4:1,name=isolated"),
    "cpu-only.yaml": ("--assume", "os=debian-12,name=ci-runner"),
}


def test_every_plan_entry_has_its_example() -> None:
    assert sorted(PLANS) == sorted(p.name for p in EXAMPLE_FILES)


def test_the_readme_says_what_each_example_shows() -> None:
    text = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLE_FILES:
        assert f"`{path.name}`" in text, f"examples/README.md has no line for {path.name}"


def _check_stack(config: Config, stack: dict[str, Any], gpu: bool) -> None:
    """The lock group's stack holds what the file's stack: asks for."""
    s = config.stack
    for spec in s.frameworks:
        req = Requirement(spec)
        got = stack["frameworks"][canonicalize_name(req.name)]
        local = "+" in str(req.specifier)  # torch==2.13.0+cpu names the build too
        version = f"{got['version']}+{got['variant']}" if local else got["version"]
        assert req.specifier.contains(version, prereleases=True), (spec, got)
        assert req.extras <= set(got.get("extras") or []), (spec, got)
    driver = stack["driver"]
    if s.driver == "none" or not gpu:
        assert driver is None
    else:
        assert driver is not None
        if s.driver != "auto":
            assert driver["version" if "." in s.driver else "branch"] == s.driver
        if s.kernel_modules != "auto":
            assert driver["kernel_modules"] == s.kernel_modules
        if config.install.method != "auto":
            assert driver["install_method"] == config.install.method
    for key in ("cuda_toolkit", "cudnn"):
        wanted = getattr(s, key)
        assert (stack[key] or {}).get("version") == (None if wanted == "none" else wanted), key
    if s.python != "auto":
        assert stack["python"] == s.python
    if config.install.python_source != "auto":
        assert stack["python_source"] == config.install.python_source
    torch = stack["frameworks"].get("torch")
    if torch and s.torch_index != "auto":
        index = {"pypi": "https://pypi.org/simple", "pytorch": "https://download.pytorch.org/whl/"}[s.torch_index]
        assert torch["index_url"].startswith(index), torch


def _check_role_vars(config: Config, group: dict[str, Any], every: dict[str, Any]) -> None:
    """The run dir's role variables hold what the file's install: asks for."""
    i = config.install
    assert group["python_env_path"] == i.venv
    assert group["nvidia_driver_reboot"] == i.reboot
    if i.pip.index_url:
        assert group["frameworks_index_url"] == i.pip.index_url
    assert group["frameworks_find_links"] == list(i.pip.find_links)
    if i.apt.mirror:
        assert group["nvidia_driver_debian_mirror"] == i.apt.mirror
    if i.apt.proxy:
        env = every["provision_environment"]
        assert (env["http_proxy"], env["https_proxy"]) == (i.apt.proxy, i.apt.proxy)
    if i.python_mirror:
        assert group["python_env_python_mirror"] == i.python_mirror


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_plans_and_the_plan_holds_what_it_asks_for(path: Path, tmp_path: Path) -> None:
    config = load_config(path)  # schema-valid (exit 2 otherwise, and here an exception)
    if path.name not in PLANS:
        pytest.fail(
            f"examples/{path.name} has no entry in PLANS (tests/unit/project/test_examples.py): give its --assume"
        )
    args = PLANS[path.name]
    r = provision("plan", "-c", str(path), *args, "--out", "run", "--json", cwd=tmp_path, offline=True)
    assert r.returncode == 0, r.stderr
    assert OFFLINE_MARK not in r.stderr  # an --assume plan reaches nothing, the file's mirrors included
    doc = json.loads(r.stdout)
    assume = dict(part.split("=", 1) for part in args[args.index("--assume") + 1].split(","))
    assert doc["groups"], r.stdout
    for group in doc["groups"]:
        _check_stack(config, group["stack"], gpu="gpu" in assume)
        run = tmp_path / "run" / "group_vars"
        _check_role_vars(
            config,
            yaml.safe_load((run / f"{group['name']}.yml").read_text()),
            yaml.safe_load((run / "all.yml").read_text()),
        )


def test_pinned_plan_shows_the_pinned_driver_branch_toolkit_and_cudnn(tmp_path: Path) -> None:
    r = provision("plan", "-c", str(EXAMPLES / "pinned.yaml"), *PLANS["pinned.yaml"], "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"will install: driver 580\.\d+\.\d+ \(open modules, nvidia-repo\)", r.stdout), r.stdout
    assert "cuda toolkit 13.0" in r.stdout and "cudnn 9.20.0.48" in r.stdout
    assert "+ cuda-toolkit-13-0 " in r.stdout and "+ nvidia-open-580=580." in r.stdout


def test_air_gapped_plan_names_the_mirror_that_stands_in_for_pypi(tmp_path: Path) -> None:
    """The lock names the upstream index; the printed plan must say the hosts use the site's mirror."""
    r = provision(
        "plan", "-c", str(EXAMPLES / "air-gapped.yaml"), *PLANS["air-gapped.yaml"], cwd=tmp_path, offline=True
    )
    assert r.returncode == 0, r.stderr
    mirror = yaml.safe_load((EXAMPLES / "air-gapped.yaml").read_text())["install"]["pip"]["index_url"]
    assert f"note: pip: the hosts install from {mirror} in place of PyPI" in r.stdout, r.stdout


def test_workstation_plan_leaves_the_driver_alone_and_says_what_it_needs(tmp_path: Path) -> None:
    r = provision("plan", "-c", str(EXAMPLES / "workstation.yaml"), *PLANS["workstation.yaml"], "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [host] = doc["hosts"]
    assert not any(c.startswith("driver") for c in host["changes"]) and host["reboot"] == "no"
    [group] = doc["groups"]
    assert any("the driver is left alone" in w["message"] for w in group["warnings"])


def test_cpu_only_lets_the_verification_pass_on_the_cpu() -> None:
    assert load_config(EXAMPLES / "cpu-only.yaml").verify.allow_cpu is True


# ---------------------------------------------------------------------------------------------
# The README shows two of the files inline.

_FENCE = re.compile(r"^(`{3,}|~{3,})")


def _fenced_blocks(text: str) -> list[tuple[int, int, str]]:
    """(index of the opening line, of the closing line, content) of each fenced code block."""
    lines = text.splitlines()
    blocks: list[tuple[int, int, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].lstrip())
        if m is None:
            i += 1
            continue
        fence, start = m.group(1), i
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith(fence):
            i += 1
        blocks.append((start, i, "\n".join(lines[start + 1 : i])))
        i += 1
    return blocks


def _shown_blocks(text: str, name: str) -> list[str]:
    """The README's blocks that show ``name``: the first block after each line outside a block
    that names it, and any block whose first line is a comment naming it (that line left out)."""
    blocks = _fenced_blocks(text)
    inside = {n for start, end, _ in blocks for n in range(start, end + 1)}
    shown: list[str] = []
    for n, line in enumerate(text.splitlines()):
        if name in line and n not in inside:
            shown += [body for start, _, body in blocks if start > n][:1]
    for _, _, body in blocks:
        first, _, rest = body.partition("\n")
        if first.lstrip().startswith("#") and name in first:
            shown.append(rest)
    return shown


@pytest.mark.parametrize("name", ["inventory/ssh-hosts.ini", "examples/ssh-fleet.yaml"])
def test_the_readme_shows_the_file_as_it_is(name: str) -> None:
    text = README.read_text()
    shown = _shown_blocks(text, name)
    assert shown, f"README.md shows no fenced block after a line naming {name}: show the file inline (issue 18)"
    want = (REPO / name).read_text().strip("\n")
    assert want in [s.strip("\n") for s in shown], (
        f"README.md's block for {name} differs from the file; it must be the file as it is:\n{want}"
    )
