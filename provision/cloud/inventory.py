"""What ``cloud up`` leaves behind for the next step: an Ansible inventory and a known_hosts.

``inventory/ec2-<run>.yml`` is a plain Ansible YAML inventory (``ansible_host``,
``ansible_user``, ``ansible_ssh_private_key_file``) that ``provision probe -i`` / ``up -i``
take as it is. The host keys come from the instance's console output, where cloud-init prints
them between ``BEGIN SSH HOST KEY KEYS`` markers, so the first SSH connection is verified
instead of trusted blindly; they go into the run's own known_hosts, named in the inventory.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
_END = "-----END SSH HOST KEY KEYS-----"
_KEY = re.compile(r"\b((?:ssh-(?:ed25519|rsa|dss))|(?:ecdsa-sha2-nistp\d+))\s+([A-Za-z0-9+/]+={0,3})")


def host_keys_from_console(text: str) -> list[tuple[str, str]]:
    """(key type, base64 key) pairs from the last complete host-key block of a console log.

    Lines may carry prefixes (``ec2: ``, kernel timestamps); keys that do not decode are skipped,
    so a garbled console never yields a key we would trust.
    """
    end = text.rfind(_END)
    if end < 0:
        return []
    begin = text.rfind(_BEGIN, 0, end)
    if begin < 0:
        return []
    keys: list[tuple[str, str]] = []
    for kind, blob in _KEY.findall(text[begin:end]):
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            continue
        # The blob starts with its own length-prefixed type name; check it names the same type.
        if len(raw) > 4 and raw[4 : 4 + int.from_bytes(raw[:4], "big")] == kind.encode():
            keys.append((kind, blob))
    return keys


@dataclass(frozen=True)
class Host:
    name: str  # the inventory name: the instance id
    address: str
    port: int
    user: str
    instance_type: str
    zone: str
    host_keys: tuple[tuple[str, str], ...]


def write_known_hosts(path: Path, hosts: Iterable[Host]) -> int:
    """One line per key, ``[addr]:port`` form when the port is not 22; returns the key count."""
    lines = []
    for h in hosts:
        where = h.address if h.port == 22 else f"[{h.address}]:{h.port}"
        lines += [f"{where} {kind} {blob}" for kind, blob in h.host_keys]
    path.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def inventory_doc(
    *,
    run: str,
    region: str,
    hosts: list[Host],
    private_key: Path | None,
    known_hosts: Path | None,
    base: str,
    os_id: str,
) -> dict[str, Any]:
    group_vars: dict[str, Any] = {
        "provision_run": run,
        "provision_cloud": "ec2",
        "provision_region": region,
        "provision_os": os_id,
        # A Deep Learning AMI has NVIDIA's driver already: the plan keeps it rather than replacing it.
        "provision_base": base,
    }
    if private_key is not None:
        group_vars["ansible_ssh_private_key_file"] = str(private_key)
    if known_hosts is not None:
        group_vars["provision_known_hosts"] = str(known_hosts)
        group_vars["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    host_vars = {
        h.name: {
            "ansible_host": h.address,
            "ansible_port": h.port,
            "ansible_user": h.user,
            "ec2_instance_type": h.instance_type,
            "ec2_zone": h.zone,
        }
        for h in hosts
    }
    return {"all": {"hosts": host_vars, "vars": group_vars}}


def write_inventory(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    run = doc["all"]["vars"]["provision_run"]
    header = f"# Written by `provision cloud up` (run {run}); `provision cloud down --run {run}` ends it.\n"
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return path
