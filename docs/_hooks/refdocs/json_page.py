"""reference/json.md: the JSON document of every command's ``--json``.

The commands come from the click app (every command with a ``--json`` option must have a contract
here, or the build fails). Where a command runs without reaching a host or a cloud (resolve,
plan --assume, matrix, advise, status on an empty folder), its examples are run during the build
and the described keys must be exactly the keys they print. The commands that need hosts or AWS
are described from their code and held to real documents by tests: tests/unit/project/test_docs_reference.py
(probe --local, the smoke job's report, up's records) and tests/integration/test_docs_cloud_json.py
(cloud up|ls|down on a moto server). tune's report is described in part (its main results).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refdocs.md import ASSUME, RefDocError, code, described_table, generated, keys_table, plan_example, prose, run_cli


@dataclass(frozen=True)
class Contract:
    summary: str
    keys: dict[str, str]
    # argument lists run during the build (no host, no cloud); the first is shown
    examples: tuple[tuple[str, ...], ...] = ()
    # keys only some of the documents have (a matrix view, a fleet's cross-host check)
    optional: tuple[str, ...] = ()
    # the per-host (or per-instance) object in a list key: (key, {its keys: meaning})
    items: tuple[str, dict[str, str]] | None = None
    source: str = ""  # for a contract without examples: the code that writes the document


# one host of `up --json` (and of `rollback --json`, the same run document)
UP_HOST = {
    "host": "The host's name.",
    "ok": "Whether it passed (also true for `not-verified`: nothing to verify in check mode).",
    "changed": "Changed Ansible tasks (0 on a converged host).",
    "failed_task": "The task that failed, else null.",
    "reboots": "Reboots done.",
    "verdict": "The verification verdict: `pass`, `fail`, `no-gpu`, `not-run`, or (`up --check` only) `not-verified`.",
    "duration_s": "Seconds for the host.",
}

HOST_RESULT = {"ok": "Whether every host (and the cross-host check, if any) passed."}

VERIFY_REPORT = {
    "schema": "`provision.verify/1`.",
    "host": "The host's name.",
    "ok": "Whether the host passed.",
    "verdict": "`pass`, `fail` or `no-gpu` (no usable GPU and no `--allow-cpu`).",
    "duration_s": "Seconds the job took.",
    "versions": "What is installed: driver, torch and its CUDA and cuDNN, the other frameworks.",
    "expected": "What the lock says should be installed.",
    "counts": "GPUs seen by the PCI bus, NVML and torch.",
    "torch_error": "Why torch could not be imported or use CUDA, else null.",
    "arch_list": "The compute capabilities the torch build has kernels for.",
    "errors": "What went wrong, one line each.",
    "gpus": "Per GPU: `{index, name, compute_capability, memory_gib, uuid, health, speed, kernel_ok, kernel_error}`.",
    "checks": "Each check: `{name, ok, value, unit, threshold}` (GEMM throughput, memory bandwidth, all-reduce, ...).",
    "warnings": "Caveats that do not fail the host.",
    "training": "The training run: `{device, steps, loss_first, loss_last, samples_per_s, gpu_util_mean_pct}`.",
    "distributed": "The DDP run across the host's GPUs, where there are several.",
    "multihost": "The cross-host run (`--multi-host`), else null.",
    "frameworks": "TensorFlow and JAX smoke checks, where installed.",
    "cpu_speed": "The CPU's speed (a host without a GPU).",
    "memory": "Host memory.",
    "error": "The error object of a host that could not be verified at all (unreachable, no venv).",
}

CONTRACTS: dict[str, Contract] = {
    "provision up": Contract(
        "Plan, apply, verify, report: one object per host.",
        {
            "ok": "Whether every host passed verification.",
            "run": "The run id; the run's files are under `.provision/runs/<run>/` (report.json, report.html).",
            "hosts": "One object per host.",
            "cloud": "With `--cloud`: the launched run, as `provision cloud up --json` prints it.",
        },
        optional=("cloud",),
        items=("hosts", UP_HOST),
        source="`provision/fleet/records.py` (`UpResult.to_json`; tests/unit/project/test_docs_reference.py checks it)",
    ),
    "provision rollback": Contract(
        "`provision up`'s document for the run that applied the earlier locks, and each host's step back.",
        {
            "ok": "Whether every host passed verification on its earlier lock.",
            "run": "The run id (`.provision/runs/<run>/`).",
            "hosts": "One object per host, as `provision up --json` has them.",
            "rollback": "One `{host, from, to, run}` per host: the lock hash it ran, the one it went back to, "
            "and the run that passed with that lock there (null when `--to` named a lock that never passed there).",
        },
        items=("hosts", UP_HOST),
        source="`provision/cli/rollback.py` (tests/integration/test_up_lock.py runs it on an SSH test host)",
    ),
    "provision bundle": Contract(
        "The bundle written (or, with `--verify`, checked): its file, sizes and what it is for.",
        {
            "ok": "True (an error is the error document).",
            "bundle": "The bundle file.",
            "sha256": "The whole file's sha256 (not with `--verify`).",
            "bytes": "The file's size; with `--verify`, the members' size unpacked.",
            "manifest_sha256": "The sha256 of its MANIFEST.",
            "parts": "Bytes per part: `lock`, `wheels`, `uv`, `playbooks`, `remote` (not with `--verify`).",
            "files": "With `--verify`: how many members matched the MANIFEST.",
            "info": "Its `bundle.json` ([bundle file](bundle.md)).",
        },
        optional=("sha256", "parts", "files"),
        source="`provision/cli/bundle.py` (tests/unit/fleet/test_bundle.py builds and verifies one)",
    ),
    "provision plan": Contract(
        "What the plan will change per host; the lock and the run dir it wrote.",
        {
            "ok": "true.",
            "out": "The run dir written (`--out`).",
            "lock": "The lock written (`--lock-out`).",
            "hosts": "Per host: what changes and which reboots will happen.",
            "groups": "The lock's groups (as in [provision.lock](lock.md), without `host` and `reasons`).",
            "files": "Every file written into the run dir.",
            "notes": "What to know of the lock and the install (a lock without a wheel closure, a mirror in "
            "place of PyPI), each URL's login shown as `***`.",
        },
        examples=(("plan", "--assume", ASSUME, "--json"),),
        items=(
            "hosts",
            {
                "host": "The host's name.",
                "group": "Its lock group.",
                "probed": "Whether it was probed (false with `--assume`).",
                "present": "Versions found on the host (probed hosts).",
                "changes": "What will be installed or changed, one line each.",
                "reboot": "Whether and when a reboot will happen.",
                "notes": "Anything else to know before applying.",
            },
        ),
    ),
    "provision resolve": Contract(
        "The stack for a described host (no host contact).",
        {
            "ok": "true (an unsatisfiable request is the error object, exit 3).",
            "host": "The host the stack was resolved for: gpu, compute_capability, gpu_count, os, arch, python.",
            "stack": "The versions: driver, fabric_manager, cuda_toolkit, cudnn, frameworks, python, python_source "
            "(as in [provision.lock](lock.md#stack)).",
            "warnings": "Caveats (`{code, message}`).",
            "reasons": "Why each version was chosen.",
        },
        examples=(("resolve", "--gpu", "H100-SXM", "--framework", "torch", "--json"),),
    ),
    "provision matrix": Contract(
        "What the knowledge says; which keys depend on the options.",
        {
            "ok": "true.",
            "knowledge": "`{version, sha256}` of the knowledge.",
            "gpus": "Without options: every GPU.",
            "gpu": "With `--gpu`: the GPU.",
            "drivers": "With `--gpu` or `--drivers`: the driver branches (and whether the GPU can use each).",
            "frameworks": "With `--gpu` or `--framework`: framework releases and whether they run on the GPU.",
            "instances": "With `--instances`: the EC2 GPU instance types with prices.",
        },
        examples=(
            ("matrix", "--drivers", "--json"),
            ("matrix", "--json"),
            ("matrix", "--gpu", "A10G", "--json"),
            ("matrix", "--instances", "--json"),
        ),
        optional=("gpus", "gpu", "drivers", "frameworks", "instances"),
    ),
    "provision probe": Contract(
        "Facts per host.",
        {"ok": "Whether every host answered.", "hosts": "One object per host."},
        items=(
            "hosts",
            {
                "host": "The host's name.",
                "ok": "Whether it answered.",
                "error": "The error object when it did not, else null.",
                "facts": "What was found: OS, kernel, arch, GPUs (PCI ID, model), NVSwitches, driver, CUDA, cuDNN, "
                "frameworks, Secure Boot, nouveau, headers, disk, package locks, cloud instance type.",
                "duration_s": "Seconds the probe took.",
            },
        ),
        source="`provision/hosts/gather.py` (tests/unit/project/test_docs_reference.py checks it against "
        "`probe --local`)",
    ),
    "provision verify": Contract(
        "One host: its verification report. An inventory: `{ok, hosts: [report, ...]}`, plus `multihost` with "
        "`--multi-host`.",
        VERIFY_REPORT,
        optional=("error", "hosts"),
        source="`provision/remote/smoke/job.py` and `provision/fleet/verify.py` "
        "(tests/unit/project/test_docs_reference.py checks it against the job's report of a recorded H200 run)",
    ),
    "provision status": Contract(
        "The fleet as the state DB knows it.",
        {
            "ok": "false when `--check-drift` found drift.",
            "state": "The state DB's path.",
            "state_exists": "Whether it exists yet (`provision up` creates it).",
            "hosts": "One object per host the state knows.",
        },
        examples=(("status", "--json"),),
        items=(
            "hosts",
            {
                "host": "The host's name.",
                "lock_hash": "The lock last applied.",
                "applied_at": "When.",
                "verdict": "The last verification's verdict.",
                "verified_lock_hash": "The lock it was verified against.",
                "verified_at": "When.",
                "last_run": "The last run's id.",
                "converged": "Whether the last verification passed with the lock last applied.",
                "health": "The last `provision health` answer: `{status, checked_at, problems, lock_hash}`, else null.",
                "rolled_back_from": "When the host came to its lock by `provision rollback`: the lock it went "
                "back from, else null.",
                "previous_lock_hash": "The lock the host ran before the current one (the newest other lock "
                "in its run history; a run that failed on the host does not count), else null.",
                "rollback": "What `provision rollback` would re-apply: `{possible, lock_hash, run}`, the lock "
                "of the newest other run that passed verification there and whose content the state DB keeps.",
            },
        ),
    ),
    "provision health": Contract(
        "Every host's provision-health answer (schema `provision.health-fleet/1`).",
        {
            "schema": "`provision.health-fleet/1`.",
            "ok": "Whether every host is healthy.",
            "counts": "How many hosts have each status.",
            "hosts": "One object per host, in the inventory's order.",
        },
        items=(
            "hosts",
            {
                "host": "The host's name.",
                "ok": "Whether it is healthy.",
                "status": "`healthy`, `unhealthy`, `unknown` (it cannot tell), `unreachable`, `not-installed` "
                "(no provision-health: no `up` since it came).",
                "problems": "What is wrong, one line each (`drift torch: locked 2.13.0, found none`).",
                "lock_hash": "The lock hash the host's spec names (the state DB's for the lock applied there).",
                "error": "Why there is no answer, else null.",
                "checked_at": "When (UTC).",
                "seconds": "Seconds from the connection to the answer.",
                "report": "The host program's own `provision.health-report/1` (docs/how-to/health.md), else null.",
            },
        ),
        source="`provision/fleet/health.py` (tests/unit/cli/test_health_cli.py runs it on this machine)",
    ),
    "provision cloud up": Contract(
        "The launched run.",
        {
            "ok": "true.",
            "run": "The run id (tag `provision:run`).",
            "region": "The AWS region.",
            "inventory": "The inventory written for the run.",
            "expires_at": "When the TTL ends (tag `provision:expires-at`, ISO 8601).",
            "host_keys": "The instances' SSH host keys, read from their console output.",
            "private_key": "The key pair's private key file, when one was created.",
            "warnings": "Caveats (an SSH CIDR open to the world, ...).",
            "instances": "One object per instance.",
            "attempts": "Each launch tried, in order: `{type, zone, market, outcome}` (`launched` or the AWS error "
            "code: capacity, quota, ...).",
        },
        items=(
            "instances",
            {
                "id": "The instance id.",
                "type": "The instance type.",
                "public_ip": "Its public address (null without one).",
                "private_ip": "Its private address.",
                "state": "The EC2 state.",
                "zone": "The availability zone.",
                "market": "`spot` or `on-demand`.",
            },
        ),
        source="`provision/cloud/launcher.py` (`launch_json`; tests/integration/test_docs_cloud_json.py checks it "
        "against a moto server)",
    ),
    "provision cloud ls": Contract(
        "The instances provision launched.",
        {
            "ok": "true.",
            "region": "The AWS region.",
            "instances": "One object per instance.",
            "usd_per_hour": "The sum of their hourly prices.",
            "cost_so_far_usd": "What they have cost so far.",
            "unpriced": "Instances with no known price.",
            "skipped": "Instances tagged `provision:run` that provision did not launch (the tag is not a run id, "
            "or the instance lacks the run's `provision-<run>` key pair and group): `resource`, `run` (the tag) "
            "and `reason`; not listed, not touched.",
        },
        items=(
            "instances",
            {
                "id": "The instance id.",
                "run": "Its run (tag `provision:run`).",
                "type": "The instance type.",
                "state": "The EC2 state.",
                "zone": "The availability zone.",
                "market": "`spot` or `on-demand`.",
                "public_ip": "Its public address.",
                "private_ip": "Its private address.",
                "launched": "When it was launched (ISO 8601).",
                "expires_at": "When its TTL ends (ISO 8601), else null.",
                "usd_per_hour": "Its price per hour (null: unknown).",
                "price_source": "Where the price comes from.",
                "cost_so_far_usd": "What it has cost so far.",
                "ttl_on_host": "Whether the host itself powers off at `expires_at` (the TTL holds without the "
                "controller).",
                "expired": "Whether its TTL has passed.",
            },
        ),
        source="`provision/cli/cloud.py` (tests/integration/test_docs_cloud_json.py checks it against a moto server)",
    ),
    "provision cloud down": Contract(
        "What was removed.",
        {
            "ok": "true.",
            "region": "The AWS region.",
            "runs": "The runs taken down.",
            "terminated": "Instances terminated.",
            "security_groups": "Security groups deleted.",
            "key_pairs": "Key pairs deleted.",
            "local_files": "Local files of the runs removed (inventories, keys).",
            "skipped": "What the tags selected but provision did not make (instances, security groups, key pairs "
            "without the run's `provision-<run>` names, or tagged with no run id): `resource`, `run` (the tag) "
            "and `reason`; left alone.",
        },
        source="`provision/cli/cloud.py` (tests/integration/test_docs_cloud_json.py checks it against a moto server)",
    ),
    "provision advise cost": Contract(
        "Cloud against an own server, per year.",
        {
            "ok": "true.",
            "cloud_per_year": "Cloud cost per year (USD).",
            "own_per_year": "Own server cost per year (USD).",
            "break_even_hours_per_day": "Hours of use per day where both cost the same.",
            "recommendation": "`cloud` or `own`.",
            "savings_per_year": "What the recommendation saves per year.",
            "cloud_price": "The hourly price used and where it came from (`--cloud-price` or the knowledge, with "
            "its source and date).",
            "inputs": "Every input of the formula.",
            "assumptions": "Each assumption behind the numbers (`{name, value, origin, flag, meaning}`): `origin` is "
            "`given`, `default` or `knowledge`, and `flag` names what changes it (power and ops left at 0 say so).",
        },
        examples=(
            (
                "advise",
                "cost",
                "--instance-type",
                "g5.xlarge",
                "--hours-per-day",
                "8",
                "--server-price",
                "12000",
                "--json",
            ),
        ),
    ),
    "provision advise gpu": Contract(
        "The memory a model needs (an estimate) and the GPUs and instance types that fit, cheapest first.",
        {
            "ok": "true.",
            "memory_gib": "The estimate (GiB).",
            "estimate": "true: an estimate, not a measurement.",
            "breakdown": "Its parts: weights, KV cache, activations, optimizer state, overhead.",
            "how": "Each part's arithmetic, as text (e.g. `8B x 2 bytes (bf16)`).",
            "constants": "The LoRA/QLoRA constants used (`--mode lora|qlora`), each with its sources "
            "(`provision/matrix/data/finetune.yaml`); empty for the other modes.",
            "assumptions": "What the ranking assumes: the prices (region, date, source), how a model is split "
            "over GPUs, one row per family.",
            "model": "The model as understood (parameters, precision, mode, layers, hidden size).",
            "notes": "The assumptions behind the estimate.",
            "recommendations": "GPUs and instance types that fit, cheapest first, with prices and their sources.",
            "excluded": "GPUs left out and why (`{gpu, why}`: no native support for the precision, ...).",
        },
        examples=(("advise", "gpu", "--params", "8B", "--json"),),
    ),
    "provision tune": Contract(
        "One host: its tune report (schema `provision.tune/1`: the batch-size and DataLoader sweeps, mixed "
        "precision, channels_last, grouped convolution); an inventory: `{ok, hosts: [report, ...]}`.",
        {
            "schema": "`provision.tune/1`.",
            "host": "The host's name.",
            "ok": "Whether the measurements ran.",
            "verdict": "`pass` or `fail`.",
            "best_batch_size": "The smallest batch within 5% of the best throughput.",
            "best_workers": "The best DataLoader setting: `{workers, pin_memory, samples_per_s, data_wait_pct}`.",
            "amp": "Mixed precision against fp32.",
            "channels_last": "channels_last against contiguous.",
            "grouped_conv": "A grouped against a standard convolution.",
        },
        source="`provision/remote/tune_job.py` (the report has more keys than these: the raw sweeps and the device)",
    ),
}


def json_commands() -> list[str]:
    """The command paths that take ``--json`` (walked from the click app)."""
    from refdocs.cli_page import commands

    return [f.path for f in commands() if any(p.name == "as_json" for p in f.command.params)]


def trimmed(doc: Any, n: int = 2) -> Any:
    """``doc`` with every list cut to its first ``n`` entries (long tables stay readable)."""
    if isinstance(doc, dict):
        return {k: trimmed(v, n) for k, v in doc.items()}
    if isinstance(doc, list):
        return [trimmed(v, n) for v in doc[:n]]
    return doc


def _run(args: tuple[str, ...]) -> dict[str, Any]:
    if args[0] == "plan":  # run once per build, shared with lock.md
        return plan_example()[0]
    with tempfile.TemporaryDirectory() as tmp:
        return run_cli(args, Path(tmp))[0]


def section(path: str, contract: Contract) -> str:
    parts = [f"## `{path} --json`\n\n{prose(contract.summary)}\n\n"]
    docs = [_run(args) for args in contract.examples]
    if docs:
        seen: list[str] = []
        for doc in docs:
            extra = [k for k in doc if k not in contract.keys]
            if extra:
                raise RefDocError(f"json.md: `{path} --json` prints keys with no description: {', '.join(extra)}")
            seen += [k for k in doc if k not in seen]
        parts.append(keys_table(f"json.md ({path})", contract.keys, seen, contract.optional))
    else:
        parts.append(described_table(contract.keys))
    if contract.items is not None:
        key, described = contract.items
        items = [item for doc in docs for item in doc.get(key, [])]
        parts.append(f"\nEach entry of `{key}`:\n\n")
        if items:
            parts.append(keys_table(f"json.md ({path}: {key}[])", described, items[0]))
        else:
            parts.append(described_table(described))
    if docs:
        shown = " ".join(contract.examples[0])
        cut = trimmed(docs[0])
        note = " (lists cut to their first two entries)" if cut != docs[0] else ""
        parts.append(f"\n`provision {shown}`, run while this page was built{note}:\n\n")
        parts.append(code(json.dumps(cut, indent=2, ensure_ascii=False), "json"))
    else:
        parts.append(
            "\nThis needs hosts or AWS, so no example runs while the site is built; "
            f"described from {contract.source}.\n"
        )
    return "".join(parts)


def page() -> str:
    paths = json_commands()
    missing = [p for p in paths if p not in CONTRACTS]
    if missing:
        raise RefDocError(f"json.md: {', '.join(missing)} take --json but have no contract in refdocs/json_page.py")
    return "".join(
        [
            "# JSON output\n\n",
            generated(
                "the click app (which commands take `--json`), the contracts in `docs/_hooks/refdocs/json_page.py` "
                "and real runs of the commands that need no host"
            ),
            "With `--json` a command prints one JSON document on stdout and nothing else there (progress and "
            "the one-line error go to stderr). Every document has `ok`. A failure is the error object of "
            '[Exit codes](exit-codes.md#the-error-object): `{"ok": false, "error": {code, message, hint, '
            "suggestions}}`.\n\n",
            "\n".join(section(p, CONTRACTS[p]) for p in paths),
        ]
    )
