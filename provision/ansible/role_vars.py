"""Lock group -> role variables: the values every role reads through its documented interface
(defaults/main.yml), from the lock group's host, stack and package plan and the install settings.

Package names, versions, holds, repositories and services come from the plan alone
(:func:`package_vars`, which splits it by role); nothing here names a package of NVIDIA's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from provision.ansible.checks import _check_package, _check_text, _check_version
from provision.ansible.settings import pip_sources
from provision.errors import BadInput
from provision.matrix import load
from provision.model.lock import Lock, LockGroup, PythonPackage
from provision.model.packages import ROLES as PACKAGE_ROLES
from provision.model.packages import PackagePlan, PipPlan, Repository
from provision.model.settings import InstallSettings, check_url
from provision.model.stack import DriverPin, Stack
from provision.stack.distro_versions import filled_example
from provision.stack.packages import packaging, template_values
from provision.stack.request import HostSpec

PYPI = "https://pypi.org/simple"

# The role variables group_vars() takes from the lock group (its host, stack and packages) that
# say *what* is installed, and where a user changes that instead. `--set` of one of them is
# refused by plan and up: the run dir would install what provision.lock does not say, and verify,
# drift and the fast converge path, which read the lock, would disagree with the host. Those that
# say only *where from* (WHERE_FROM) stay settable for mirrors: a repository's URL (its key stays
# pinned), and frameworks_installs' index, whose packages must stay the lock's
# (check_installs_override). The rest comes from the install settings (venv, reboot, pip).
# tests/unit/ansible/test_render.py checks both tables against group_vars itself.
_DRIVER = "stack.driver / stack.kernel_modules / install.method in provision.yaml (or --driver)"
_FRAMEWORKS = "stack.frameworks / stack.torch_index in provision.yaml (or --framework)"
_PYTHON = "stack.python / install.python_source in provision.yaml (or --python, --python-source)"
_BY_GPU = "nothing: the lock decides it from the GPU and driver (change stack.driver in provision.yaml)"
_UNPLANNED = "nothing: the lock does not plan it"
LOCK_OWNED: dict[str, str] = {
    **{
        f"{role}_{part}": hint
        for role, hint in (
            ("nvidia_driver", _DRIVER),
            ("fabric_manager", _BY_GPU),
            ("cuda_toolkit", "stack.cuda_toolkit in provision.yaml (or --cuda-toolkit)"),
            ("cudnn", "stack.cudnn in provision.yaml (or --cudnn)"),
            ("container_toolkit", _UNPLANNED),
            ("dcgm", _UNPLANNED),
        )
        for part in ("packages", "holds", "services", "enabled")
    },
    "nvidia_driver_module_streams": _DRIVER,
    "nvidia_driver_method": _DRIVER,
    "nvidia_driver_branch": _DRIVER,
    "nvidia_driver_version": _DRIVER,
    "nvidia_driver_kernel_modules": _DRIVER,
    "preflight_driver_install": _DRIVER,
    "preflight_driver_uses_dkms": _DRIVER,
    "preflight_require_gpu": _DRIVER,
    "verify_driver_version": _DRIVER,
    "fabric_manager_version": _BY_GPU,
    "cuda_toolkit_version": "stack.cuda_toolkit in provision.yaml (or --cuda-toolkit)",
    "cuda_toolkit_method": _DRIVER,
    "cudnn_version": "stack.cudnn in provision.yaml (or --cudnn)",
    "container_toolkit_version": _UNPLANNED,
    "dcgm_version": _UNPLANNED,
    "python_env_python": _PYTHON,
    "python_env_source": _PYTHON,
    "python_env_os_packages": _PYTHON,
    "frameworks_enabled": _FRAMEWORKS,
    "frameworks_locked": _FRAMEWORKS,  # the closure by hash; its index follows install.pip
    "verify_frameworks": _FRAMEWORKS,
    "verify_stack": _FRAMEWORKS,
}

WHERE_FROM = frozenset({*(f"{role}_repositories" for role in PACKAGE_ROLES), "frameworks_installs"})


def check_installs_override(overrides: Mapping[str, object], lock: Lock, install: InstallSettings) -> None:
    """``--set frameworks_installs`` may send the lock's wheels to another index, not change them:
    its requirements must be each lock group's own (BadInput otherwise, before anything is written)."""
    value = overrides.get("frameworks_installs")
    if value is None:
        return
    if not isinstance(value, list) or not all(
        isinstance(e, Mapping) and isinstance(e.get("packages"), list) for e in value
    ):
        raise BadInput(
            "--set frameworks_installs: not a list of {packages: [...], index_url: ...}",
            "see the frameworks role on the docs' Reference > Roles page"
            " (`make docs` builds it: site/reference/roles/index.html)",
        )
    given = sorted(str(p) for e in value for p in e["packages"])
    for group in lock.groups:
        locked = sorted(str(p) for e in group_vars(group, install)["frameworks_installs"] for p in e["packages"])
        if given != locked:
            raise BadInput(
                f"--set frameworks_installs: its packages {', '.join(given) or 'none'} are not the lock's "
                f"({', '.join(locked) or 'none'}, group {group.name})",
                f"change only its index_url; the versions follow {_FRAMEWORKS}",
            )


def check_repositories_override(overrides: Mapping[str, object], lock: Lock) -> None:
    """``--set <role>_repositories`` may point a repository the lock plans at a mirror, not trust
    another key: each entry must name a repository of the lock and carry its key fingerprint, in
    every lock group that has it (BadInput otherwise, before anything is written)."""
    for role in PACKAGE_ROLES:
        value = overrides.get(f"{role}_repositories")
        for entry in value if isinstance(value, list) else []:
            name = entry.get("name") if isinstance(entry, Mapping) else None
            want = {
                str(r.key_fingerprint)
                for group in lock.groups
                for r in (group.packages.repositories if group.packages is not None else [])
                if r.name == name
            }
            if not want:
                raise BadInput(
                    f"--set {role}_repositories: {name!r} is no repository of the lock",
                    "name a repository the plan lists (`provision plan` shows each with its key)",
                )
            given = "" if entry.get("key_fingerprint") is None else str(entry["key_fingerprint"])
            if want != {given}:  # one --set serves every group: each must pin that same key
                raise BadInput(
                    f"--set {role}_repositories: the key fingerprint {given or 'none'} of {name} is not the "
                    f"lock's ({', '.join(sorted(want))})",
                    "a mirror changes the url and key_url only; its key stays the one the knowledge pins",
                )


def check_lock_group(group: LockGroup, install: InstallSettings) -> None:
    """A lock group read from a file (`up --lock`) is data anyone could have edited: before any
    host is contacted, its role variables are made (every value render refuses is refused here: a
    requirement that is no PEP 508 pin, a URL that is not one URL), and each repository must be
    the knowledge's for the group's OS, URL, key URL and key fingerprint alike. A site's mirror of
    a repository is ``--set <role>_repositories`` (its key still the lock's:
    check_repositories_override); a lock whose repository moved since it was planned is planned
    again. ``install``: bare of credentials (split_credentials)."""

    group_vars(group, install)
    k = load()
    os_id = _check_text(group.host.os or "", "the lock's host.os")
    values = template_values(HostSpec(gpu=None, gpu_count=0, os=k.os_release(os_id), arch=str(group.host.arch)))
    for r in group.packages.repositories if group.packages is not None else []:
        t = packaging(k).repository(r.name, os_id)
        if t is None:
            differs = ["the knowledge has no such repository"]
        else:
            known = {"url": t.url.format_map(values), "key_url": t.key_url.format_map(values)}
            known["key fingerprint"] = str(t.key_fingerprint)
            got = {"url": r.url, "key_url": r.key_url, "key fingerprint": str(r.key_fingerprint)}
            differs = [f"{w} {got[w]} (the knowledge's: {known[w]})" for w in known if got[w] != known[w]]
        if differs:
            raise BadInput(
                f"group {group.name}: the lock's repository {r.name} is not the knowledge's for {os_id}: "
                + "; ".join(differs),
                "plan again with `provision plan`; a mirror goes in --set <role>_repositories, with the same key",
            )


def group_vars(group: LockGroup, install: InstallSettings, *, index_login: bool = False) -> dict[str, Any]:
    """The role variables of one lock group (every role's documented interface). ``index_login``:
    pip's indexes take a login (render has split it out of ``install`` into the hosts' netrc)."""
    host, stack = group.host, group.stack
    os_id = _check_text(host.os or "", "the lock's host.os")
    distro = os_id.split("-")[0]
    plan = group.packages
    if plan is None:  # a lock group without a package plan installs nothing it could name
        raise BadInput("the lock's packages.manager is not apt or dnf", "regenerate the lock with `provision plan`")
    pip = plan.pip
    family = "debian" if plan.manager == "apt" else "redhat"
    out: dict[str, Any] = package_vars(plan)

    driver = stack.driver
    method = _method(driver, install)
    uses_dkms = not (method == "distro" and distro == "ubuntu")
    out.update(_driver_vars(driver, method, install))
    out.update(
        {
            "preflight_driver_install": driver is not None,
            "preflight_driver_uses_dkms": uses_dkms,
            # A driver or a CUDA build of a framework is useless without a GPU: preflight refuses
            # such a host before any change (a probed host without one has no driver in the
            # lock, but its CUDA torch would still be installed for nothing).
            "preflight_require_gpu": driver is not None or any(fw.cuda for fw in stack.frameworks.values()),
            "preflight_mok_signing": bool(install.mok_key and install.mok_cert),
            "preflight_disk_paths": ["/", str(Path(install.venv).parent)],
        }
    )

    fm = stack.fabric_manager
    out["fabric_manager_enabled"] = fm is not None
    if fm is not None:
        out["fabric_manager_version"] = _check_version(fm, "fabric_manager.version")

    toolkit = stack.cuda_toolkit
    out["cuda_toolkit_enabled"] = toolkit is not None
    if toolkit is not None:
        out["cuda_toolkit_version"] = _check_version(toolkit, "cuda_toolkit.version")
        out["cuda_toolkit_method"] = method

    cudnn = stack.cudnn
    out["cudnn_enabled"] = cudnn is not None
    if cudnn is not None:
        out["cudnn_version"] = _check_version(cudnn.version, "cudnn.version")

    python = _check_version(stack.python or host.python, "python")
    out.update(_python_vars(stack, os_id, family, python, install))
    out.update(_framework_vars(stack, pip, install))
    closure = group.python_packages
    out["frameworks_locked"] = locked_installs(closure, install.pip.index_url or "")
    out["frameworks_installer"] = installer(install.installer, closure, index_login=index_login)
    if out["frameworks_installer"] == "uv":  # python_env installs uv for it (the standalone path's own)
        out.update({"python_env_install_uv": True, **_uv_vars(install)})

    for extra, version in (("container_toolkit", stack.container_toolkit), ("dcgm", stack.dcgm)):
        out[f"{extra}_enabled"] = version is not None
        if version is not None:
            out[f"{extra}_version"] = _check_text(version, f"{extra}.version")

    out.update(
        {
            "verify_driver_version": driver.version if driver else "",
            "verify_frameworks": _pinned_versions(out["frameworks_installs"]),
            "verify_venv": install.venv,
            "verify_stack": stack.to_json(),
        }
    )
    return out


def package_vars(plan: PackagePlan) -> dict[str, Any]:
    """Every role's ``_packages``, ``_holds``, ``_repositories``, ``_services``, and the driver's streams.

    A split by role and nothing more; the names and URLs are checked again here because they
    end up in package-manager arguments and repository files on the hosts.
    """
    out: dict[str, Any] = {}
    for role in PACKAGE_ROLES:
        mine = plan.for_role(role)
        names = {e.name for e in mine}
        used = {e.repository for e in mine}
        out[f"{role}_packages"] = [{"name": _plan_package(e.name), "version": e.version} for e in mine]
        out[f"{role}_holds"] = [h for h in plan.holds if h in names]
        out[f"{role}_repositories"] = [_repository_vars(r) for r in plan.repositories if r.name in used]
        out[f"{role}_services"] = [s.name for s in plan.services if s.role == role]
    out["nvidia_driver_module_streams"] = list(plan.module_streams)
    return out


def _plan_package(name: str) -> str:
    """A package name of the plan. A plan made without facts (--assume) leaves Ubuntu's distro
    driver names for the host to complete (provision.stack.distro_versions: ``{kernel_flavour}``,
    ``{kernel}``; the nvidia_driver role fills them in): checked with those parts filled."""
    try:
        _check_package(filled_example(name), "package name")  # a brace left over is refused here
    except BadInput:
        _check_package(name, "package name")  # refused too, and the message names the lock's own name
    return name


def _repository_vars(r: Repository) -> dict[str, str]:
    if r.key_fingerprint is None:
        raise BadInput(
            f"the lock's packages.repositories entry {r.name!r} has no key fingerprint",
            "regenerate the lock with `provision plan`",
        )
    return {
        "name": _check_package(r.name, "repository name"),
        "url": check_url(r.url, "repository URL"),
        "key_url": check_url(r.key_url, "repository key URL"),
        "key_fingerprint": r.key_fingerprint,
    }


def _pinned_versions(installs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """{distribution: exact version} of the pinned requirements (``tensorflow[and-cuda]==2.20.0``)."""
    out: dict[str, str] = {}
    for entry in installs:
        for req in entry["packages"]:
            name, _, version = str(req).partition("==")
            out[name.split("[")[0].strip()] = version.strip()
    return out


def _method(driver: DriverPin | None, install: InstallSettings) -> str:
    if driver is not None and driver.install_method:
        return driver.install_method
    return "nvidia-repo" if install.method == "auto" else install.method


def _driver_vars(driver: DriverPin | None, method: str, install: InstallSettings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nvidia_driver_enabled": driver is not None,
        "nvidia_driver_reboot": install.reboot,
        "nvidia_driver_reboot_controller": install.reboot_controller,
    }
    if install.apt.mirror:
        out["nvidia_driver_debian_mirror"] = install.apt.mirror
    if install.mok_key and install.mok_cert:
        out["nvidia_driver_mok_key"] = install.mok_key
        out["nvidia_driver_mok_cert"] = install.mok_cert
    if driver is None:
        return out
    flavour = driver.kernel_modules
    if flavour not in ("open", "proprietary"):
        raise BadInput(f"the lock's driver.kernel_modules {flavour!r} is unknown", "regenerate the lock")
    out.update(
        {
            "nvidia_driver_method": method,
            "nvidia_driver_branch": _check_version(driver.branch, "driver.branch"),
            "nvidia_driver_version": _check_version(driver.version, "driver.version"),
            "nvidia_driver_kernel_modules": flavour,
        }
    )
    return out


def _python_vars(stack: Stack, os_id: str, family: str, python: str, install: InstallSettings) -> dict[str, Any]:
    """python_env's interface: the OS's Python, or a standalone CPython that uv installs (then the
    OS's own python3, whatever its version, only runs uv)."""
    source = stack.source
    if source not in ("os", "standalone"):
        raise BadInput(f"the lock's stack.python_source {source!r} is neither os nor standalone", "regenerate the lock")
    out: dict[str, Any] = {"python_env_path": install.venv, "python_env_python": python, "python_env_source": source}
    if source == "os":
        out["python_env_os_packages"] = _python_packages(os_id, family, python)
        return out
    for url in (install.python_mirror, install.python_downloads_json):
        if url:
            check_url(url, "Python download URL")
    out.update(
        {
            "python_env_os_packages": _python_packages(os_id, family, _default_python(os_id) or python),
            "python_env_python_mirror": install.python_mirror or "",
            "python_env_python_downloads_json": install.python_downloads_json or "",
            **_uv_vars(install),
        }
    )
    return out


def _uv_vars(install: InstallSettings) -> dict[str, Any]:
    """python_env's uv: the knowledge's release, installed with pip from install.pip's sources
    (one install for both uses: the standalone CPython and the closure's installer), by the
    sha256 of its wheels for each CPU (the role picks the host's)."""

    sp = load().t.standalone_python
    if sp is None:
        raise BadInput("the knowledge has no standalone_python entry (os.yaml)", "reinstall provision")
    pip = install.pip
    return {
        "python_env_uv_version": sp.uv,
        "python_env_uv_sha256": {arch: sorted(files.values()) for arch, files in sp.uv_wheels.items()},
        "python_env_pip_args": ([f"--index-url={pip.index_url}"] if pip.index_url else [])
        + pip_sources(pip.extra_index_urls, pip.find_links, pip.trusted_hosts),
    }


def installer(setting: str, closure: Sequence[PythonPackage], *, index_login: bool = False) -> str:
    """install.installer -> the frameworks role's ``frameworks_installer``. uv installs only the
    closure's hashed lists (a lock without one resolves its pins with pip, as before), so a lock
    without a closure gets pip whatever the setting. ``auto`` picks uv for a closure whose every
    wheel comes from an index that takes no login: the same hashed lists install in 0.29x pip's
    time (benchmarks/bench_install.py, docs/contributing/benchmarks.md), and python_env installs uv from that index too.
    pip stays for a closure with find-links wheels (an air-gapped wheelhouse, ``index`` "": such a
    folder holds the frameworks' wheels, not necessarily uv's) and for an index behind a login
    (the hosts' netrc: uv's run against a login index failed on the test hosts, pip's passes, so
    auto keeps pip there until uv's is shown to work). ``uv`` asks for uv in every case."""
    if setting not in ("auto", "uv", "pip"):
        raise BadInput(f"install.installer {setting!r} is none of auto, uv, pip", "write installer: auto")
    if not closure or setting == "pip":
        return "pip"
    return "uv" if setting == "uv" or (not index_login and all(p.index for p in closure)) else "pip"


def _python_packages(os_id: str, family: str, python: str) -> list[str]:
    """OS packages that give ``python<X.Y>`` with its venv module (see docs: the OS table)."""
    default = _default_python(os_id)
    if family == "debian":
        return ["python3", "python3-venv"] if python == default else [f"python{python}", f"python{python}-venv"]
    return ["python3"] if python == default else [f"python{python}"]


def _default_python(os_id: str) -> str | None:
    try:
        return load().os_release(os_id).default_python
    except BadInput:
        return None


def _framework_vars(stack: Stack, pip: PipPlan | None, install: InstallSettings) -> dict[str, Any]:
    requirements = list(pip.requirements if pip else ())
    if not requirements:  # a lock without packages.pip: exact pins from the stack
        requirements = [f"{name}=={fw.version}" for name, fw in stack.frameworks.items()]
    for req in requirements:
        _check_pin(req)
    mirror = install.pip.index_url

    def mirrored(url: str) -> str:
        return mirror if mirror and url.rstrip("/") == PYPI else url

    index = pip.index_url if pip else ""
    extras = [mirrored(u) for u in (pip.extra_index_urls if pip else ())] + list(install.pip.extra_index_urls)
    for url in [index, *extras]:
        if url:
            check_url(url, "index URL")
    return {
        "frameworks_enabled": bool(requirements),
        "frameworks_venv": install.venv,
        "frameworks_installs": [{"packages": requirements, "index_url": mirrored(index)}] if requirements else [],
        "frameworks_index_url": mirror or "",
        "frameworks_extra_index_urls": extras,
        "frameworks_find_links": list(install.pip.find_links),
        "frameworks_trusted_hosts": list(install.pip.trusted_hosts),
    }


def _check_pin(req: object) -> str:
    """A requirement of the lock is one PEP 508 requirement pinned with ``==``, nothing pip could
    read as an option (``--index-url=http://x==1`` has an ``==`` too) or a URL to fetch."""
    req = _check_text(req, "framework requirement")
    try:
        parsed = Requirement(req)
    except InvalidRequirement:
        parsed = None
    pinned = parsed is not None and [s.operator for s in parsed.specifier] == ["=="]
    if not pinned or parsed is None or parsed.url or parsed.marker or req.lstrip().startswith("-") or " " in req:
        raise BadInput(
            f"the lock's framework requirement {req!r} is not one exact PEP 508 pin (name[extras]==version)",
            "regenerate the lock with `provision plan`",
        )
    return str(req)


def locked_installs(closure: Sequence[PythonPackage], mirror: str = "") -> list[dict[str, Any]]:
    """The frameworks role's ``frameworks_locked``: the lock's wheel closure as one hashed
    requirement list per index, so each wheel comes only from the index it was locked on (the
    PyTorch index's copy of a PyPI name is never taken for PyPI's); ``mirror``
    (install.pip.index_url) stands in for PyPI, "" is the install's find-links. The same lists
    suit ``uv pip install --require-hashes --no-deps``."""
    by_index: dict[str, list[str]] = {}
    for p in closure:
        index = mirror if mirror and p.index.rstrip("/") == PYPI else p.index
        if index:
            check_url(index, "index URL")
        by_index.setdefault(index, []).append(p.requirement())
    return [{"index_url": i, "requirements": sorted(reqs)} for i, reqs in sorted(by_index.items())]
