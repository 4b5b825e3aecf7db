"""provision-health: compare this host with the lock ``up`` applied, in under two seconds.

Reads the health spec (``provision.health/1``, written by the controller's
:mod:`provision.fleet.health_spec` and installed beside this program) and checks, each against the
spec: the loaded, installed and locked driver; the GPUs NVML sees, their uncorrectable ECC errors,
pending page retirement and row remapping, persistence mode; Xid events in the kernel log (the
GPU's held until a reboot or ``--clear-xids``);
Fabric Manager where NVSwitches are; the venv's distributions (METADATA versions, RECORD files);
the last verify's verdict and age. Exit 0 healthy, 1 unhealthy, 2 cannot tell (or bad input: one
line). Standard library only; docs/how-to/health.md is the page for users.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from . import exporters, nvml, probes, slurm
from .versions import build_matches, split_local, version_matches

SCHEMA = "provision.health/1"
REPORT = "provision.health-report/1"
STATE = "provision.health-state/1"
HEALTHY, UNHEALTHY, UNKNOWN = 0, 1, 2
SPEC = Path("/etc/provision/health.json")  # where the spec is read from unless --spec says otherwise
# Xids NVIDIA's catalog sends to the application (immediate action RESTART_APP: a program's own
# fault, the GPU is fine): reported as notes, never as a problem of the host. Source:
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (13, 31, 43, 45).
# confidence: medium: the catalog's rows for 31, 43 and 45 were not read whole here.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
# Every other Xid stays a problem (the state's "xids") until what clears it has happened. The
# catalog's "Resolution Bucket (Immediate Action)" asks for RESET_GPU, RESTART_VM or RESTART_BM
# (reboot) for the GPU's own faults (79 "GPU has fallen off the bus": RESTART_BM); a one-off line in
# the kernel log is not a healed GPU, so a host is never healthy again merely because the next run
# saw no NEW Xid. Cleared by a reboot (the boot id changes) or by `provision-health --clear-xids`
# (the admin who reset or replaced the GPU). A GPU reset alone is not observed: NVML names no reset
# count or time, so a reset-bucket Xid is held until a reboot or the acknowledgement, never guessed.
CLEARS = "a reboot or `provision-health --clear-xids`"
# Bytes of RECORD-listed files hashed per run (the rest only stat'ed): a pass over torch's ~1 GB
# is spread over runs by a cursor in the state file, so each run stays well under two seconds.
HASH_BUDGET = 32 << 20


class SpecError(Exception):
    """The spec is missing or malformed: exit 2 with one line."""


@dataclass(frozen=True)
class Roots:
    """Every place the program reads, injectable (tests point them at stand-ins)."""

    proc: Path = Path("/proc")
    kmsg: Path = Path("/dev/kmsg")
    dpkg_query: str = "dpkg-query"
    rpm: str = "rpm"
    systemctl: str = "systemctl"
    nvml_library: str = "libnvidia-ml.so.1"
    state: Path = Path("/var/lib/provision/health-state.json")
    # The last verify `up` ran here, written by the controller after its smoke job
    # (provision.fleet.health_spec.LAST_VERIFY): the spec stays the lock's alone, so a second
    # `up` with the same lock rewrites no spec and changes nothing.
    last_verify: Path = Path("/var/lib/provision/last-verify.json")


@dataclass
class Result:
    problems: list[str] = field(default_factory=list)  # unhealthy
    unknown: list[str] = field(default_factory=list)  # could not tell
    notes: list[str] = field(default_factory=list)  # worth knowing, healthy
    facts: dict[str, Any] = field(default_factory=dict)
    # Every locked item compared (component, locked, found, matches): the exporters' drift series.
    compared: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def compare(self, component: str, locked: str, found: str | None, ok: bool, problem: str | None = None) -> None:
        """Record a comparison with the lock; a mismatch is a problem (``drift ITEM: locked X, found Y``)."""
        self.compared.append((component, locked, found or "none", ok))
        if not ok:
            self.problems.append(problem or f"drift {component}: locked {locked}, found {found or 'none'}")

    @property
    def code(self) -> int:
        return UNHEALTHY if self.problems else UNKNOWN if self.unknown else HEALTHY

    def line(self) -> str:
        verdict = {HEALTHY: "healthy", UNHEALTHY: "unhealthy", UNKNOWN: "unknown"}[self.code]
        parts = self.problems + [f"cannot tell {u}" for u in self.unknown]
        return f"{verdict}: {'; '.join(parts)}" if parts else verdict


def _text(doc: dict[str, Any], key: str, optional: bool = False) -> str | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise SpecError(f"the health spec's {key} is not text")
    return value


def load_spec(path: Path) -> dict[str, Any]:
    """The spec, checked for the keys this program reads (a bad one is exit 2, one line)."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(f"cannot read the health spec {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError(f"the health spec {path} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise SpecError(f"{path} is not a {SCHEMA} file (schema: {found!r}); rerun `provision up` to install it")
    _text(doc, "lock_hash")
    _text(doc, "venv", optional=True)
    for key, kind in (("expected", dict), ("driver", dict), ("gpus", dict), ("python_packages", list)):
        if not isinstance(doc.get(key), kind):
            raise SpecError(f"the health spec's {key} is not {'an object' if kind is dict else 'a list'}")
    packages = doc["python_packages"]
    if not all(isinstance(p, dict) and all(isinstance(p.get(k), str) for k in ("name", "version")) for p in packages):
        raise SpecError("the health spec's python_packages is not a list of {name, version, sha256}")
    count = doc["gpus"].get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise SpecError("the health spec's gpus.count is not a count")
    if doc.get("verify") is not None and not isinstance(doc["verify"], dict):
        raise SpecError("the health spec's verify is not an object or null")
    return doc


# --- the checks ------------------------------------------------------------------------------------


def check_driver(spec: dict[str, Any], roots: Roots, out: Result) -> None:
    want = spec["expected"].get("driver")
    loaded = probes.loaded_driver(roots.proc)
    out.facts["driver_loaded"] = loaded
    d = spec["driver"]
    installed: str | None = None
    if d.get("package"):
        command = roots.dpkg_query if d.get("manager") == "apt" else roots.rpm
        installed, error = probes.installed_package(str(d.get("manager")), str(d["package"]), command)
        out.facts["driver_installed"] = installed
        if error:
            out.unknown.append(f"driver installed: {error}")
        elif installed is None:
            problem = f"drift driver: locked {want or 'a driver'}, package {d['package']} not installed"
            out.compare("driver", want or "a driver", None, False, problem)
    if want and installed:
        ok = version_matches("driver", installed, want)
        out.compare("driver", want, installed, ok, f"drift driver: locked {want}, installed {installed}")
    if loaded is None:
        if want or spec["gpus"].get("count"):
            out.problems.append("driver not loaded")
    elif installed and loaded != installed:
        out.problems.append(f"driver {installed} installed but {loaded} loaded: reboot pending")
    elif want and not installed:  # no package answer: the loaded module is what there is to compare
        ok = version_matches("driver", loaded, want)
        out.compare("driver", want, loaded, ok, f"drift driver: locked {want}, loaded {loaded}")


def check_gpus(spec: dict[str, Any], roots: Roots, out: Result, nv: dict[str, Any]) -> None:
    want_count = spec["gpus"].get("count") or 0
    want_models = sorted(spec["gpus"].get("models") or [])
    if not nv.get("available"):
        if want_count:
            out.unknown.append("GPUs: no NVML library")
        return
    if "error" in nv:
        # A host locked without a driver and probed without GPUs may still hold the NVML library
        # (a driver package's user-space half, no module): NVML not starting is then what the
        # lock says, not a fault.
        no_gpu_locked = not want_count and not spec["expected"].get("driver")
        (out.notes if no_gpu_locked else out.problems).append(f"nvml: {nv['error']}")
        return
    gpus = nv["gpus"]
    out.facts["gpus"] = gpus
    if len(gpus) != want_count:
        out.problems.append(f"gpu count {len(gpus)}, probed {want_count}")
    models = sorted(str(g.get("name")) for g in gpus)
    if want_models and models != want_models and len(gpus) == want_count:
        have, probed = ", ".join(sorted(set(models))), ", ".join(sorted(set(want_models)))
        out.problems.append(f"gpu models {have}, probed {probed}")
    for g in gpus:
        at = f"on GPU {g['index']}"
        if g.get("ecc_uncorrected"):
            out.problems.append(f"ecc {g['ecc_uncorrected']} uncorrectable errors {at}")
        if g.get("retired_pages_pending"):
            out.problems.append(f"retired pages pending {at} (reset the GPU)")
        if g.get("row_remap_failure"):
            out.problems.append(f"row remap failed {at}")
        elif g.get("row_remap_pending"):
            out.problems.append(f"row remap pending {at} (reset the GPU)")
        if g.get("persistence") is False:
            (out.problems if spec.get("persistence") else out.notes).append(f"persistence mode off {at}")


def check_xids(roots: Roots, out: Result, nv: dict[str, Any], state: dict[str, Any]) -> None:
    boot = _read(roots.proc / "sys" / "kernel" / "random" / "boot_id")
    try:
        records, lost = probes.kernel_records(roots.kmsg)
    except OSError as exc:
        out.unknown.append(f"xid: kernel log {roots.kmsg} unreadable ({exc.strerror})")
        return
    # Sequence numbers restart at each boot: a state from another boot says nothing, and a reboot
    # is what clears the Xids held from the boot before.
    same_boot = state.get("boot_id") == boot
    seen = state.get("kmsg_seq")
    after = seen if same_boot and isinstance(seen, int) else -1
    if lost:
        out.notes.append("kernel log records were overwritten before they were read")
    events = probes.xids(records, after)
    held = held_xids(state) if same_boot else []
    by_pci = {probes.pci_key(str(g.get("pci_bus_id") or "")): g["index"] for g in nv.get("gpus", [])}
    for x in events:
        if x.code in APPLICATION_XIDS:
            out.notes.append(f"xid {x.code} on {_where(x.address, by_pci)}")
        elif not any(h["xid"] == x.code and h["pci"] == x.address for h in held):  # one entry per Xid and GPU
            held.append({"xid": x.code, "pci": x.address, "seq": x.seq})
    # The same words every run while it is held: Slurm's drain reason stays unchanged (no rewrite).
    out.problems += [f"xid {h['xid']} on {_where(h['pci'], by_pci)}" for h in held]
    if held:
        out.notes.append(f"xid problems stay until {CLEARS}")
    out.facts["xids"] = [{"seq": x.seq, "xid": x.code, "pci": x.address} for x in events]
    out.facts["xids_held"] = held
    state["boot_id"] = boot
    state["kmsg_seq"] = max([after] + [seq for seq, _ in records])
    state["xids"] = held


def _where(address: str, by_pci: dict[tuple[int, int, int] | None, int]) -> str:
    gpu = by_pci.get(probes.pci_key(address))
    return f"GPU {gpu}" if gpu is not None else f"PCI {address}"


def held_xids(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The Xids the state holds (``[{"xid", "pci", "seq"}]``); a state of an earlier version has
    none, and malformed entries are dropped (the next Xid in the log is still seen)."""
    entries = state.get("xids")
    if not isinstance(entries, list):
        return []
    return [
        {"xid": e["xid"], "pci": e["pci"], "seq": e.get("seq")}
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("xid"), int) and isinstance(e.get("pci"), str)
    ]


def check_fabric_manager(spec: dict[str, Any], roots: Roots, out: Result) -> None:
    unit = spec.get("fabric_manager")  # the lock's systemd unit, where it is expected
    if not unit:
        return
    answer = probes.unit_state(str(unit), roots.systemctl)
    out.facts["fabric_manager"] = answer
    if answer.startswith("unknown"):
        out.unknown.append(f"fabric manager: {answer}")
    elif answer != "active":
        out.problems.append(f"fabric manager {answer}")


def check_venv(spec: dict[str, Any], out: Result, state: dict[str, Any], budget: int) -> None:
    venv = spec.get("venv")
    if not venv:
        return
    root = Path(venv)
    if not probes.site_packages(root):
        out.problems.append(f"venv {venv} missing")
        return
    dists = probes.distributions(root)
    expected = spec["expected"]
    locked = {probes.normalise(p["name"]): str(p["version"]) for p in spec["python_packages"]}
    for name in ("torch", "tensorflow", "jax"):  # the components, where the lock has no closure
        if name in expected and name not in locked:
            locked[name] = str(expected[name])
    checked = []
    for key, want in sorted(locked.items()):
        have = dists.get(key)
        found = have.version if have else None
        ok = version_matches(key, found, want)
        out.compare(key, want, found, ok)
        if ok and have:
            checked.append(have)
    variant = expected.get("torch_variant")
    torch = dists.get("torch")
    if torch and variant:
        build = split_local(torch.version)[1] or "untagged"  # PyPI's default build carries no tag
        ok = build_matches(torch.version, variant)
        out.compare("torch_variant", str(variant), build, ok, f"drift torch build: locked {variant}, found {build}")
    python = expected.get("python")
    found_python = _pyvenv_version(root)
    if python and found_python:
        out.compare("python", python, found_python, version_matches("python", found_python, python))
    _check_records(checked, out, state, budget)


def _check_records(dists: list[probes.Distribution], out: Result, state: dict[str, Any], budget: int) -> None:
    """Every RECORD-listed file stat'ed each run; sha256 of up to ``budget`` bytes of them per run,
    resumed where the last run stopped (the cursor in the state), so a full pass takes a few runs."""
    files: list[tuple[probes.Distribution, str, str, int]] = []
    for d in sorted(dists, key=lambda d: d.name.lower()):
        error = probes.read_record(d)
        if error:
            out.problems.append(error)
            continue
        for bad in probes.record_stat(d)[:3]:
            out.problems.append(f"{d.name}: {bad}")
        files += [(d, path, digest, size or 0) for path, digest, size in d.records]
    if not files:
        return
    cursor = state.get("record_cursor")
    start = cursor % len(files) if isinstance(cursor, int) else 0
    spent = hashed = 0
    i = start
    while hashed < len(files) and (spent < budget or hashed == 0):
        d, path, digest, size = files[i]
        if probes.record_hash(d.dist_info.parent, path, digest) is False:
            out.problems.append(f"{d.name}: {path} differs from its RECORD hash")
        spent += size
        hashed += 1
        i = (i + 1) % len(files)
    state["record_cursor"] = i
    out.facts["record_files"] = {"listed": len(files), "hashed": hashed, "hashed_bytes": spent}


def recorded_verify(spec: dict[str, Any], path: Path, out: Result) -> dict[str, Any] | None:
    """The last verify: ``path``'s (``up`` writes it) when it was of this spec's lock, else the
    spec's own (null where ``up`` installed it)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return spec.get("verify")
    except (OSError, ValueError) as exc:
        out.notes.append(f"{path} unreadable ({exc}): the spec's verify is used")
        return spec.get("verify")
    if not isinstance(doc, dict) or doc.get("lock_hash") != spec["lock_hash"]:
        out.notes.append(f"{path} is of another lock: not verified with this one")
        return spec.get("verify")
    limit = (spec.get("verify") or {}).get("max_age_s")
    return {
        "verdict": doc.get("verdict"),
        "at": doc.get("at"),
        "max_age_s": limit,
        "gpu": doc.get("gpu"),
        "figures": doc.get("figures") or {},
    }


def check_verify(spec: dict[str, Any], out: Result, now: float, recorded: dict[str, Any] | None = None) -> None:
    verify = recorded if recorded is not None else spec.get("verify")
    if not verify:
        out.notes.append("never verified")
        return
    verdict = verify.get("verdict")
    try:
        at = datetime.fromisoformat(str(verify.get("at"))).timestamp()
    except ValueError:
        at = None
    age = None if at is None else max(0, round(now - at))
    # the verify in use (the recorded one, else the spec's): the textfile's figures come from here
    out.facts["verify"] = {
        "verdict": verdict,
        "age_s": age,
        "gpu": verify.get("gpu"),
        "figures": verify.get("figures") or {},
    }
    if verdict != "pass":
        out.problems.append(f"last verify {verdict}")
    limit = verify.get("max_age_s")
    if isinstance(limit, int) and age is not None and age > limit:
        out.problems.append(f"last verify {age // 86400} days old")


# --- state, output ---------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _pyvenv_version(venv: Path) -> str | None:
    for line in (_read(venv / "pyvenv.cfg") or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return value.strip()
    return None


def load_state(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema": STATE}
    return doc if isinstance(doc, dict) and doc.get("schema") == STATE else {"schema": STATE}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Renamed into place, so a run killed midway (node-problem-detector's timeout) leaves the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".health-state.")
    with os.fdopen(fd, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def save_state(path: Path, state: dict[str, Any], out: Result) -> None:
    try:
        write_state(path, state)
    except OSError as exc:
        out.notes.append(f"state not saved ({path}: {exc.strerror}): Xids may be reported again")


def clear_xids(path: Path) -> str:
    """``--clear-xids``: forget the held Xids (the admin fixed what they said), keep the kernel log's
    position (so the same lines are not read as new). The line to print; OSError when the state
    cannot be rewritten (it is root's)."""
    state = load_state(path)
    held = held_xids(state)
    if not held:
        return f"no Xid held in {path}"
    state["xids"] = []
    write_state(path, state)
    return "cleared: " + ", ".join(f"xid {h['xid']} on PCI {h['pci']}" for h in held)


def run(spec: dict[str, Any], roots: Roots, budget: int = HASH_BUDGET, now: float | None = None) -> Result:
    out = Result()
    state = load_state(roots.state)
    nv = nvml.read(roots.nvml_library)
    check_driver(spec, roots, out)
    check_gpus(spec, roots, out, nv)
    if spec["expected"].get("driver") or spec["gpus"].get("count") or out.facts.get("driver_loaded"):
        check_xids(roots, out, nv, state)
    else:  # Xids are the NVIDIA kernel module's records: a host with none locked and none loaded has none
        out.notes.append("xid: no NVIDIA driver locked or loaded: no kernel log to read")
    check_fabric_manager(spec, roots, out)
    check_venv(spec, out, state, budget)
    check_verify(spec, out, time.time() if now is None else now, recorded_verify(spec, roots.last_verify, out))
    save_state(roots.state, state, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="provision-health", description="This host against the lock provision applied.")
    p.add_argument("--spec", type=Path, default=SPEC, help="the health spec")
    p.add_argument("--json", action="store_true", help="one JSON document (provision.health-report/1)")
    p.add_argument(
        "--slurm", action="store_true", help="Slurm HealthCheckProgram mode: drain, update or resume this node"
    )
    p.add_argument(
        "--slurm-node", help="this node's Slurm NodeName (default: SLURMD_NODENAME, else the short host name)"
    )
    p.add_argument("--scontrol", default="scontrol", help=argparse.SUPPRESS)
    p.add_argument("--state", type=Path, default=Roots.state, help="where the last run's position is kept")
    p.add_argument(
        "--clear-xids",
        action="store_true",
        help="forget the Xids held since they were seen (as root, once the GPU is reset or replaced) and exit",
    )
    p.add_argument("--proc", type=Path, default=Roots.proc, help=argparse.SUPPRESS)
    p.add_argument("--kmsg", type=Path, default=Roots.kmsg, help=argparse.SUPPRESS)
    p.add_argument("--dpkg-query", default=Roots.dpkg_query, help=argparse.SUPPRESS)
    p.add_argument("--rpm", default=Roots.rpm, help=argparse.SUPPRESS)
    p.add_argument("--systemctl", default=Roots.systemctl, help=argparse.SUPPRESS)
    p.add_argument("--nvml-library", default=Roots.nvml_library, help=argparse.SUPPRESS)
    p.add_argument("--last-verify", type=Path, default=Roots.last_verify, help=argparse.SUPPRESS)
    p.add_argument("--hash-budget-mib", type=int, default=HASH_BUDGET >> 20, help=argparse.SUPPRESS)
    exporters.add_arguments(p)
    a = p.parse_args(argv)
    if a.clear_xids:  # no spec needed: it changes the state file only
        try:
            print(clear_xids(a.state))
        except OSError as exc:
            print(f"error: cannot rewrite {a.state}: {exc.strerror} (run --clear-xids as root)", file=sys.stderr)
            return UNKNOWN
        return HEALTHY
    started = time.monotonic()
    try:
        spec = load_spec(a.spec)
        exporters.check_arguments(a)
    except (SpecError, exporters.ExportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNKNOWN
    roots = Roots(a.proc, a.kmsg, a.dpkg_query, a.rpm, a.systemctl, a.nvml_library, a.state, a.last_verify)
    out = run(spec, roots, a.hash_budget_mib << 20)
    try:
        exporters.export(a, spec, out)
    except exporters.ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return UNKNOWN
    if a.json:
        doc = {
            "schema": REPORT,
            "status": out.line().split(":")[0],
            "exit": out.code,
            "lock_hash": spec["lock_hash"],
            "problems": out.problems,
            "unknown": out.unknown,
            "notes": out.notes,
            "facts": out.facts,
            "seconds": round(time.monotonic() - started, 3),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(out.line())
    if a.slurm:  # after the verdict is printed, so a Slurm failure never hides it
        try:
            said = slurm.reconcile(out.code, out.problems, slurm.node_name(a.slurm_node), a.scontrol)
        except slurm.SlurmError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return out.code
        print(said, file=sys.stderr if a.json else sys.stdout)
    return out.code
