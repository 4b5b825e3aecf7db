"""provision-health's outputs for the engines fleets already run (standard library, Python 3.8+).

- ``--textfile DIR``: ``DIR/provision.prom`` for node_exporter's textfile collector, which reads
  every ``*.prom`` file of its ``--collector.textfile.directory`` in Prometheus's text format at
  each scrape (https://github.com/prometheus/node_exporter, README "Textfile Collector").
- ``--nfd-features DIR``: ``DIR/provision`` for Node Feature Discovery's ``local`` source, which
  turns each ``<namespace>/<name>=<value>`` line of the files in
  ``/etc/kubernetes/node-feature-discovery/features.d/`` into a node label
  (kubernetes-sigs/node-feature-discovery, docs/usage/customization-guide.md, "Local feature
  source").

Both files are written to a dot-named temporary file in the same directory and renamed into
place, as both projects ask: the textfile collector only reads ``*.prom`` and NFD ignores dot
files, so neither ever reads half a file. docs/how-to/prometheus.md and docs/how-to/kubernetes.md
are the pages for users.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol  # Protocol: Python 3.8; annotations stay strings (__future__)

TEXTFILE = "provision.prom"
FEATURES = "provision"
# NFD's own label namespace: always allowed by nfd-master (other namespaces can be denied with
# -deny-label-ns); docs/usage/customization-guide.md, "Node labels".
NFD_PREFIX = "feature.node.kubernetes.io/provision."
NFD_EXPIRY_S = 600  # labels outlive a stopped health timer by ten minutes, then NFD drops them
# A Kubernetes label value: empty, or at most 63 of [-A-Za-z0-9_.] starting and ending
# alphanumeric (kubernetes/apimachinery pkg/util/validation/validation.go, IsValidLabelValue).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63


class ExportError(Exception):
    """An output cannot be written (no such directory, no permission): exit 2 with one line."""


class Outcome(Protocol):
    """What the checks found (check.Result): the exporters read it, never change it."""

    problems: list[str]
    facts: dict[str, Any]
    compared: list[tuple[str, str, str, bool]]

    @property
    def code(self) -> int: ...


@dataclass(frozen=True)
class Metric:
    """One metric family of the textfile (the reference page lists these)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: str = "gauge"


HEALTH_OK = Metric("provision_health_ok", "1 when provision-health found this host healthy (exit 0), else 0.")
HEALTH_EXIT = Metric("provision_health_exit_code", "provision-health's exit: 0 healthy, 1 unhealthy, 2 cannot tell.")
PROBLEMS = Metric("provision_health_problems", "How many problems the last provision-health run found.")
DRIFT = Metric(
    "provision_drift",
    "1 where what is installed differs from the lock, 0 where it is the locked version.",
    ("component", "locked", "found"),
)
VERIFY_PASS = Metric("provision_verify_pass", "1 when the last verify passed, else 0 (also when never verified).")
VERIFY_AGE = Metric("provision_verify_age_seconds", "Seconds since the last verify ran.")
GEMM = Metric(
    "provision_verify_gemm_tflops",
    "The last verify's matrix multiply throughput in TFLOP/s, slowest GPU (bf16 or fp16; fp32 on a CPU host).",
    ("gpu",),
)
COPY = Metric(
    "provision_verify_copy_gbps",
    "The last verify's device-to-device copy bandwidth in GB/s, slowest GPU (memory copy on a CPU host).",
    ("gpu",),
)
LOCK = Metric("provision_lock_info", "The lock provision applied to this host (always 1).", ("lock_hash", "group"))
METRICS = (HEALTH_OK, HEALTH_EXIT, PROBLEMS, DRIFT, VERIFY_PASS, VERIFY_AGE, GEMM, COPY, LOCK)
# The spec's verify.figures keys (provision.fleet.health_spec) -> their metric.
FIGURES = {"gemm_tflops": GEMM, "copy_gbps": COPY}


# --- Prometheus's text format ------------------------------------------------------------------
# https://prometheus.io/docs/instrumenting/exposition_formats/ (prometheus/docs,
# content/docs/instrumenting/exposition_formats.md): in a label value backslash, double quote and
# line feed are escaped as \\, \" and \n; in HELP text backslash and line feed as \\ and \n; the
# TYPE line comes before the family's first sample; the last line ends with a line feed. node_exporter
# rejects samples with timestamps in textfiles, so none are written.


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(float(value))


def _family(metric: Metric, samples: list[tuple[tuple[str, ...], float]]) -> list[str]:
    if not samples:
        return []
    lines = [f"# HELP {metric.name} {escape_help(metric.help)}", f"# TYPE {metric.name} {metric.kind}"]
    seen = set()
    for values, number in samples:
        if values in seen:  # one sample per label set, or the whole file is rejected
            continue
        seen.add(values)
        labels = ",".join(f'{k}="{escape_label(values[i])}"' for i, k in enumerate(metric.labels))
        lines.append(f"{metric.name}{{{labels}}} {_number(number)}" if labels else f"{metric.name} {_number(number)}")
    return lines


def prometheus_text(spec: dict[str, Any], out: Outcome) -> str:
    """The textfile: the verdict, every locked item compared, the last verify, the lock."""
    verify = out.facts.get("verify") or {}  # the verify in use: up's recorded one, else the spec's
    figures = verify.get("figures") or {}
    gpu = str(verify.get("gpu") or "unknown")
    lines: list[str] = []
    lines += _family(HEALTH_OK, [((), 1 if out.code == 0 else 0)])
    lines += _family(HEALTH_EXIT, [((), out.code)])
    lines += _family(PROBLEMS, [((), len(out.problems))])
    lines += _family(DRIFT, [((c, locked, found), 0 if ok else 1) for c, locked, found, ok in out.compared])
    lines += _family(VERIFY_PASS, [((), 1 if verify.get("verdict") == "pass" else 0)])
    age = verify.get("age_s")
    lines += _family(VERIFY_AGE, [((), age)] if isinstance(age, int) else [])
    for key, metric in FIGURES.items():
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines += _family(metric, [((gpu,), value)])
    lines += _family(LOCK, [((str(spec["lock_hash"]), str(spec.get("group") or "")), 1)])
    return "\n".join(lines) + "\n"


# --- Node Feature Discovery's features.d --------------------------------------------------------


def label_value(value: Any) -> str:
    """``value`` as a valid Kubernetes label value: other characters become ``-``, the ends
    alphanumeric, at most 63 characters (an empty result: the label is left out)."""
    text = re.sub(r"[^-A-Za-z0-9_.]", "-", str(value))[:LABEL_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)


# The labels (under NFD_PREFIX) and what each says; one left out where there is no value.
NFD_LABELS = {
    "verified": "`true`: the last verify passed and the host is healthy now; else `false`",
    "healthy": "`true`: provision-health exited 0; else `false`",
    "lock-hash": "the hash of the lock the host was provisioned from",
    "driver": "the NVIDIA driver loaded (`/proc/driver/nvidia/version`)",
    "cuda-toolkit": "the CUDA toolkit the lock installs",
    "torch-cuda": "the CUDA runtime of the lock's torch build",
}


def nfd_labels(spec: dict[str, Any], out: Outcome) -> dict[str, str]:
    """The node labels (name under :data:`NFD_PREFIX` -> value)."""
    expected = spec.get("expected") or {}
    verified = (out.facts.get("verify") or {}).get("verdict") == "pass"
    raw = {
        # verified: the last verify passed and the host is still what it verified (healthy now)
        "verified": "true" if verified and out.code == 0 else "false",
        "healthy": "true" if out.code == 0 else "false",
        "lock-hash": spec.get("lock_hash"),
        "driver": out.facts.get("driver_loaded"),  # the module running, not only the lock's
        "cuda-toolkit": expected.get("cuda_toolkit"),
        "torch-cuda": expected.get("torch_cuda"),
    }
    labels = {k: label_value(raw[k]) for k in NFD_LABELS if raw[k]}
    return {k: v for k, v in labels.items() if v}


def features_text(spec: dict[str, Any], out: Outcome, now: datetime, expiry_s: int = NFD_EXPIRY_S) -> str:
    """The features.d file: an ``expiry-time`` (RFC 3339) first, then one ``key=value`` a label."""
    until = (now + timedelta(seconds=expiry_s)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = ["# written by provision-health; NFD drops these labels after the expiry time", f"# +expiry-time={until}"]
    lines += [f"{NFD_PREFIX}{k}={v}" for k, v in nfd_labels(spec, out).items()]
    return "\n".join(lines) + "\n"


# --- writing -----------------------------------------------------------------------------------


def check_directory(directory: Path, option: str) -> None:
    """Before anything runs: the directory must exist (the program does not create it)."""
    if not directory.is_dir():
        why = "is not a directory" if directory.exists() else "does not exist"
        raise ExportError(f"{option} {directory} {why}: create it, or name the directory the reader watches")


def write_atomic(directory: Path, name: str, text: str) -> Path:
    """``text`` as ``directory/name``: a dot-named temporary file beside it, then a rename."""
    target = directory / name
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from node_exporter's own user
        os.replace(tmp, target)
    except OSError as exc:
        os.unlink(tmp)
        raise ExportError(f"cannot write {target}: {exc.strerror}") from None
    return target


# --- the program's options ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--textfile", type=Path, metavar="DIR", help=f"write DIR/{TEXTFILE} for node_exporter")
    parser.add_argument("--nfd-features", type=Path, metavar="DIR", help=f"write DIR/{FEATURES} for NFD's local source")
    parser.add_argument("--nfd-expiry-s", type=int, default=NFD_EXPIRY_S, help=argparse.SUPPRESS)


def check_arguments(args: argparse.Namespace) -> None:
    """Bad input is one line before any change (the state file included)."""
    for directory, option in ((args.textfile, "--textfile"), (args.nfd_features, "--nfd-features")):
        if directory is not None:
            check_directory(directory, option)


def export(args: argparse.Namespace, spec: dict[str, Any], out: Outcome, now: datetime | None = None) -> None:
    if args.textfile is not None:
        write_atomic(args.textfile, TEXTFILE, prometheus_text(spec, out))
    if args.nfd_features is not None:
        when = now or datetime.now(timezone.utc)
        write_atomic(args.nfd_features, FEATURES, features_text(spec, out, when, args.nfd_expiry_s))
