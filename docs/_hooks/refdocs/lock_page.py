"""reference/lock.md: the provision.lock format.

The key lists come from the code (``provision.model.lock``: ``SCHEMA``, ``GROUP_KEYS``, the
records' dataclass fields) and from a real lock that `provision plan --assume` writes during the
build; the meanings are written here, and any key on one side but not the other fails the build.
"""

from __future__ import annotations

import json
from dataclasses import fields

from refdocs.md import ASSUME, RefDocError, code, generated, keys_table, plan_example

TOP = {
    "schema": "The format and its version; a lock of another schema is refused (regenerate it with `provision plan`).",
    "knowledge": "The compatibility knowledge it was resolved with.",
    "groups": "Hosts that share one resolved stack (same GPU, count, OS, arch), one object per group.",
}
KNOWLEDGE = {
    "version": "The knowledge's own version (provision/matrix/data/meta.yaml).",
    "sha256": "A hash over every knowledge data file: whether a lock was resolved with exactly this knowledge.",
}
GROUP = {
    "name": "The group's name, from what the group is: GPU, count and OS (`h100_sxm_x8_ubuntu_22_04`), and the "
    "driver a stack that keeps the hosts' own driver was resolved against (`..._driver_580_95_05`), so that a host's "
    "group has the same name whichever hosts a run plans beside it (`--limit`); groups still alike (another "
    "python3) are numbered (`_2`). The rendered inventory's group, and the health spec's and metrics' `group`.",
    "hosts": "The inventory names of the hosts in the group.",
    "host": "The host description the stack was resolved for: the `host` of `provision resolve --json`.",
    "stack": "The resolved versions: the `stack` of `provision resolve --json`.",
    "packages": "The package plan: repositories, packages, holds and services per role, and the frameworks' pip "
    "requirements (`{}` in a lock without one).",
    "python_packages": "The frameworks' wheel closure, every wheel with its sha256 (empty where none was resolved: "
    "`--assume` plans, `install.lock_closure: never`).",
    "warnings": "Caveats of the set (`{code, message}`): minor-version compatibility, an end-of-life branch, ...",
    "reasons": "Why each version was chosen, in words.",
}
# ResolvedHost's field that plan sets (provision/fleet/planning.py) only when the driver is kept.
KEPT_DRIVER = "kept_driver"
HOST = {
    "gpu": "The GPU's canonical name.",
    "compute_capability": "Its compute capability.",
    "gpu_count": "GPUs per host.",
    "os": "The OS release, `ID-VERSION_ID`.",
    "arch": "`x86_64` or `aarch64`.",
    "python": "The Python of the venv.",
    "instance_type": "The EC2 instance type, where the host was described by one.",
    "kept_driver": "The driver found on the hosts when the stack keeps it (`driver: none`): `up --lock` refuses a "
    "host whose driver has moved.",
}
STACK = {
    "driver": "`{branch, version, kernel_modules, install_method}`, or null when the host's driver is kept.",
    "fabric_manager": "`{version}` (equal to the driver's) on NVSwitch systems, else null.",
    "cuda_toolkit": "A system CUDA toolkit, when asked for, else null.",
    "cudnn": "A system cuDNN, when asked for, else null.",
    "frameworks": "Per framework asked for: `{version, variant, index_url, cuda, cudnn}`; `variant` is the wheel's "
    "CUDA tag (`cu128`) or `cpu`.",
    "python": "The venv's Python `X.Y`.",
    "python_source": "`os` (the OS's python3) or `standalone` (a CPython that uv installs).",
}
PACKAGES = {
    "manager": "`apt` or `dnf`.",
    "repositories": "Signed repositories to add first: `{name, url, key_url, key_fingerprint}`.",
    "module_streams": "dnf module streams to enable (RHEL family).",
    "install": "Packages to install: `{name, version, role, repository}` (version null: the bare name).",
    "holds": "Packages held at their version (apt-mark hold, dnf versionlock).",
    "services": "systemd units to enable and start: `{name, role}`.",
    "pip": "The frameworks' requirements: `{index_url, extra_index_urls, requirements}`.",
}
PYTHON_PACKAGE = {
    "name": "The distribution's name.",
    "version": "Its exact version.",
    "sha256": "The wheel's sha256: hosts install with `--require-hashes --no-deps`.",
    "url": "Where the wheel was found.",
    "index": 'The index it was resolved on (`""`: the install\'s own find-links); each wheel is installed only '
    "from its own index.",
}


def page() -> str:
    from provision.model.host import ResolvedHost
    from provision.model.lock import GROUP_KEYS, OLD_SCHEMAS, SCHEMA, PythonPackage
    from provision.model.packages import PackagePlan

    _, lock = plan_example()
    if lock.get("schema") != SCHEMA:
        raise RefDocError(f"lock.md: plan wrote schema {lock.get('schema')!r}, the code says {SCHEMA!r}")
    group = lock["groups"][0]
    if tuple(GROUP) != GROUP_KEYS:
        raise RefDocError(f"lock.md: the group keys described here are not lock.GROUP_KEYS {GROUP_KEYS}")
    plan_fields = [f.name for f in fields(PackagePlan)]
    host_fields = [f.name for f in fields(ResolvedHost)]  # kept_driver (KEPT_DRIVER) is one of them
    package_fields = [f.name for f in fields(PythonPackage)]
    if not set(group["host"]) <= set(host_fields):
        raise RefDocError(f"lock.md: the lock's host has keys beyond ResolvedHost's: {sorted(group['host'])}")
    return "".join(
        [
            "# provision.lock\n\n",
            generated(
                "`provision/model/lock.py` and `provision/model/packages.py` (their key lists and records) and a "
                f"lock written by `provision plan --assume {ASSUME}`"
            ),
            "`provision plan` writes the lock (`--lock-out FILE`, default `provision.lock`); "
            "`provision up --from-lock FILE` applies exactly it. "
            f"The file is JSON of schema `{SCHEMA}`: two-space indent, a fixed key order and a "
            "trailing newline, so the same resolution always writes the same bytes and a lock diffs well under "
            "version control. It is written atomically (a temporary file, fsync, rename, fsync of the folder). "
            f"A lock of an older schema ({', '.join(f'`{s}`' for s in OLD_SCHEMAS)}) is bad input: regenerate it.\n\n",
            *(
                f"\n{heading}\n\n" + keys_table(f"lock.md ({where})", described, actual)
                for heading, where, described, actual in (
                    ("## Top level", "top level", TOP, list(lock)),
                    ("### `knowledge`", "knowledge", KNOWLEDGE, list(lock["knowledge"])),
                    ("## A group (`groups[]`)", "group", GROUP, list(group)),
                    ("### `host`", "group.host", HOST, host_fields),
                    ("### `stack`", "group.stack", STACK, list(group["stack"])),
                    ("### `packages`", "group.packages", PACKAGES, plan_fields),
                    ("### `python_packages[]`", "python_packages[]", PYTHON_PACKAGE, package_fields),
                )
            ),
            f"\n## Example\n\nThe lock `provision plan --assume {ASSUME}` wrote while this page was built "
            "(an `--assume` plan contacts no host and resolves no wheel closure):\n\n",
            code(json.dumps(lock, indent=2, ensure_ascii=False), "json"),
        ]
    )
