"""What `provision up` tells people: ``report.html``, one self-contained page (inline SVG plots).

The page is built from ``report.json`` (the run's document with each host's verify report), read
once into its record (:class:`provision.model.report.UpReport`): a
verdict table with each host's reason, then a section per host, then the measurements: GEMM and
copy speeds against their pass lines, training loss over the steps, GPU utilization over the
seconds of training, and time per role. No scripts, no external files: it opens the same from a
mail attachment as from the run dir.

A host's section reads one host's record (:class:`provision.model.report.HostDetail`, from
:meth:`provision.fleet.records.HostRun.detail_json`):
its verdict and why, the stack its lock group names (``locked``, the group as
:func:`provision.stack.drift.expected_versions` flattens it) beside what the smoke job found
(``verify.versions``) and what the probe found before the run (``probed``), and every check of the
smoke job with its value, unit, pass line and result. Whether a found version is the locked one
is the one version rule (:func:`provision.stack.drift.compare`).

:func:`finish_reports` writes a run's reports (report.json, verify-<host>.json, report.html) at
the end of `up`, a failure to write them being a note, never the run's outcome.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from provision.files import replace_file
from provision.fleet.charts import bar_chart, line_chart
from provision.fleet.records import CPU_CHECK_NOTE, ran_on_cpu
from provision.fleet.verify import JOB_KEYS, HostResult, failures
from provision.model.components import COMPONENTS
from provision.model.report import CacheSummary, Check, HostDetail, Probed, Scalar, Training, UpReport
from provision.model.versions import cudnn_dotted
from provision.stack.drift import compare

if TYPE_CHECKING:
    from provision.fleet.records import UpResult

_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#111827;background:#fff;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #d1d5db;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}section{margin-bottom:24px}
table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #d1d5db;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}tr.failed td{background:#fef2f2}.pass{color:#047857;font-weight:600}
.fail,.not-run{color:#b91c1c;font-weight:600}.no-gpu,.not-verified{color:#b45309;font-weight:600}
.differs{background:#fef3c7;color:#92400e;font-weight:600;padding:0 3px}
.charts{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.note{color:#4b5563;font-size:13px}
ul.why{margin:4px 0 8px;font-size:14px}td.host,td.nowrap{white-space:nowrap}
summary{cursor:pointer}summary h3{display:inline}
"""

# The smoke job's speed checks, charted against their pass lines (names from
# provision/remote/smoke/verdict.py's SPEED_UNITS): matrix multiply, the GPU's own memory, PCIe.
_SPEED_CHARTS = (
    ("Matrix multiply (GEMM) per GPU against its pass line", ("gemm_",), "TFLOP/s"),
    ("GPU memory copy (device to device) against its pass line", ("copy_d2d",), "GB/s"),
    ("Host-GPU copies over PCIe against their pass line", ("copy_h2d", "copy_d2h"), "GB/s"),
)


def _speed_bars(details: Iterable[HostDetail], prefixes: tuple[str, ...]) -> list[tuple[str, float, float | None]]:
    """One bar per host, GPU and metric, labelled ``host GPU 0 gemm_bf16``."""
    bars: list[tuple[str, float, float | None]] = []
    for d in details:
        for c in d.verify.checks if d.verify else ():
            if not c.name.startswith(prefixes) or not isinstance(c.value, int | float):
                continue
            gpu = f" GPU {c.gpu}" if c.gpu is not None else ""
            threshold = c.threshold
            bars.append(
                (
                    f"{d.host}{gpu} {c.name}",
                    float(c.value),
                    float(threshold) if isinstance(threshold, int | float) else None,
                )
            )
    return bars


def _role_seconds(details: Iterable[HostDetail]) -> list[tuple[str, float, float | None]]:
    """Seconds per role on the slowest host, in the order the roles ran."""
    totals: dict[str, float] = {}
    for d in details:
        for role, seconds in d.role_seconds.items():
            totals[role] = max(totals.get(role, 0.0), seconds)
    return [(role, seconds, None) for role, seconds in totals.items()]


def _same(values: Iterable[Scalar | Mapping[str, Scalar]]) -> float | None:
    """The one value every host has (a pass line drawn once), or None when they differ."""
    found = {float(v) for v in values if isinstance(v, int | float)}
    return found.pop() if len(found) == 1 else None


def _training_charts(details: Sequence[HostDetail]) -> tuple[str, str]:
    """The loss over the training steps and the utilization over the seconds of the timed steps.

    A report of a job from before the steps and the sampling period were recorded plots its
    points by position, and the axis says so rather than claim steps or seconds.
    """
    losses: dict[str, list[tuple[float, float]]] = {}
    util: dict[str, list[tuple[float, float]]] = {}
    bounds: list[Scalar | Mapping[str, Scalar]] = []
    util_lines: list[Scalar | Mapping[str, Scalar]] = []
    by_step = by_second = True
    for d in details:
        training = d.verify.training if d.verify else Training()
        checks = d.verify.checks if d.verify else ()
        curve = training.loss_curve
        steps = training.loss_curve_steps
        by_step = by_step and (steps is not None or not curve)
        xs = steps if steps is not None else range(len(curve))
        losses[d.host] = [(float(x), y) for x, y in zip(xs, curve, strict=False)]
        series = training.gpu_util_series
        period = training.gpu_util_period_s
        by_second = by_second and (period is not None or not series)
        util[d.host] = [(round(i * float(period or 1), 3), y) for i, y in enumerate(series)]
        if curve:
            bounds.append(training.loss_bound)
        util_lines += [c.threshold for c in checks if c.name == "training_util"]
    loss_chart = line_chart(
        "Training loss of the smoke job",
        losses if by_step else _by_position(losses),
        "loss",
        "training step" if by_step else "point of the recorded curve",
        hline=_same(bounds),
        hline_label="pass bound",
    )
    seconds = "seconds into the timed steps" if by_second else "NVML sample"
    util_chart = line_chart(
        "GPU utilization while training",
        util if by_second else _by_position(util),
        "utilization (%)",
        seconds,
        hline=_same(util_lines),
        y_max=100.0,
    )
    return loss_chart, util_chart


def _by_position(series: Mapping[str, list[tuple[float, float]]]) -> dict[str, list[tuple[float, float]]]:
    return {k: [(float(i), y) for i, (_, y) in enumerate(v)] for k, v in series.items()}


def _when(seconds: float | None) -> str:
    if not isinstance(seconds, int | float) or not seconds:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def render_html(report: UpReport) -> str:
    """The page for a run's report (pure)."""
    details = report.details
    rows = []
    for d in details:
        verdict = str(d.verdict)
        why = reasons(d)
        note = why[0] + (f" (and {len(why) - 1} more below)" if len(why) > 1 else "") if why else ""
        if ran_on_cpu(d.cpu_only_check, verdict, d.failed_task):
            note = f"{CPU_CHECK_NOTE}. {note}".strip()
        host = escape(d.host)
        rows.append(
            f'<tr><td class="host"><a href="#host-{host}">{host}</a></td><td>{escape(str(d.group))}</td>'
            f'<td class="{escape(verdict)}">{escape(verdict)}</td><td>{escape(note)}</td>'
            f"<td>{d.changed}</td><td>{escape(d.failed_task or '')}</td>"
            f"<td>{d.reboots}</td><td>{d.duration_s}</td></tr>"
        )
    loss_chart, util_chart = _training_charts(details)
    charts = [
        *(bar_chart(title, _speed_bars(details, prefixes), unit) for title, prefixes, unit in _SPEED_CHARTS),
        loss_chart,
        util_chart,
        bar_chart("Time per role (slowest host)", _role_seconds(details), "seconds"),
    ]
    names = ("GEMM", "GPU memory copy", "PCIe copies", "loss curves", "GPU utilization", "time per role")
    missing = [name for name, svg in zip(names, charts, strict=True) if not svg]
    mode = " (check mode: nothing was changed)" if report.check else ""
    passed = sum(1 for d in details if d.verdict == "pass")
    unverified = sum(1 for d in details if d.verdict == "not-verified")
    verdict = "every host passed" if report.ok else f"{passed} of {len(details)} hosts passed"
    if unverified:  # check mode with nothing to verify: not a pass, and not a failure either
        verdict = f"{passed} of {len(details)} hosts passed, {unverified} not verified (nothing installed to verify)"
    started, finished = _when(report.started_at), _when(report.finished_at)
    parts = [
        '<!doctype html><html><head><meta charset="utf-8">',
        f"<title>provision up {escape(str(report.run))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>provision up, run {escape(str(report.run))}{mode}: {verdict}</h1>",
        f'<p class="note">started {started}, finished {finished}</p>' if started and finished else "",
        _stopped(report),
        "<h2>Verdict per host</h2><table><tr><th>host</th><th>group</th><th>verdict</th><th>why</th>"
        "<th>changed</th><th>failed task</th><th>reboots</th><th>seconds</th></tr>",
        *rows,
        "</table>",
        *(host_section(d) for d in details),
        '<h2>Measurements</h2><div class="charts">',
        *(svg for svg in charts if svg),
        "</div>",
    ]
    if missing:
        parts.append(
            f'<p class="note">No data in this run for: {escape(", ".join(missing))} '
            "(no GPU, or the host was not applied or verified).</p>"
        )
    parts += _cache_section(report.cache)
    parts.append("</body></html>\n")
    return "".join(parts)


# --- one host's section -------------------------------------------------------------------------

# -- the verdict and why


def reasons(d: HostDetail) -> list[str]:
    """Why the host has its verdict, one line each, the root cause first; a rollback says so first."""
    why = _reasons(d)
    if d.rolled_back_from:
        return [f"rolled back from {d.rolled_back_from} to {d.lock_hash}", *why]
    return why


def _reasons(d: HostDetail) -> list[str]:
    verdict, message = d.verdict, d.message
    if d.failed_task:
        return [f"the task {d.failed_task!r} failed" + (f": {message}" if message else "")]
    verify = d.verify
    if verify and verdict != "pass":
        lines = failures(HostResult(host=d.host, report=dict(verify.document)))
        if not verify.checks and verify.error:  # the job gave no report: why not
            return [message or verify.error]
        if lines:
            return lines
    if message:
        return [message]
    if verdict == "pass":
        return ["every check passed" + (" (converged: the apply was skipped)" if d.converged else "")]
    return []


# -- the stack: locked, found, before


@dataclass(frozen=True)
class StackRow:
    item: str
    locked: str | None  # None: the lock does not name it
    found: str | None  # None: not read on the host (not verified, or not a thing the job reads)
    before: str | None  # what the probe found before the run
    differs: bool  # the found version is not the locked one (the one version rule)


# (shown name, key in the flat lock, key in the job's versions)
# (label, the lock's key, the smoke job's key): one row per component, in the model's order
_ITEMS: tuple[tuple[str, str | None, str | None], ...] = tuple(
    (c.label, c.key if c.locked else None, c.key if c.reported else None) for c in COMPONENTS
)
NOT_INSTALLED = "none"


def _shown(key: str, value: object) -> str:
    if value is None:
        return NOT_INSTALLED
    return cudnn_dotted(str(value)) if key == "cudnn" else str(value)


def _before(key: str, probed: Probed | None) -> str | None:
    """What the probe found for ``key`` before the run. Not its cuDNN: that is the system
    library's, and the locked cuDNN is the one in torch's wheels."""
    if probed is None:
        return None
    if key == "cuda_toolkit":
        return ", ".join(probed.cuda_toolkits) or NOT_INSTALLED
    if key == "driver":
        return _shown(key, probed.driver)
    if key in ("torch", "tensorflow", "jax"):
        return _shown(key, probed.frameworks.get(key))
    return None


def stack_rows(d: HostDetail) -> list[StackRow]:
    """The versions of one host: what its lock group names, what the smoke job read after the
    run, what the probe read before it; rows nobody has a value for are left out."""
    locked = d.locked
    probed = d.probed
    versions = d.verify.versions if d.verify else {}
    # every key the job reads is an observation once it ran: absent means not installed
    observed = {k: versions.get(k) for k in JOB_KEYS} if versions else {}
    drifted = {x.item for x in compare(locked, observed)}
    rows = []
    for name, lock_key, job_key in _ITEMS:
        lock_value = None
        if lock_key is not None and lock_key in locked:
            lock_value = _shown(lock_key, locked[lock_key])
            if lock_key == "torch" and locked.get("torch_variant"):
                lock_value += f" ({locked['torch_variant']})"
        found = _shown(job_key, versions.get(job_key)) if job_key is not None and versions else None
        key = lock_key or job_key or ""
        before = _before(key, probed)
        if lock_value is None and before in (None, NOT_INSTALLED) and found in (None, NOT_INSTALLED):
            continue  # nobody has it and nobody wants it
        differs = key in drifted or (key == "torch" and "torch_variant" in drifted)
        rows.append(StackRow(name, lock_value, found, before, differs))
    return rows


def _gpus_line(d: HostDetail) -> str:
    probed = d.probed
    gpus = d.verify.gpus if d.verify else ()
    parts = []
    if probed is not None and probed.os:
        parts.append(f"OS {probed.os}")
    if gpus:
        kinds: dict[str, int] = {}
        for g in gpus:
            desc = f"{g.name}"
            if g.memory_gib:
                desc += f", {g.memory_gib} GiB"
            if g.compute_capability:
                desc += f", compute capability {g.compute_capability}"
            kinds[desc] = kinds.get(desc, 0) + 1
        parts.append("GPUs: " + "; ".join(f"{n} × {desc}" for desc, n in kinds.items()))
    elif probed is not None:
        parts.append(f"GPUs found by the probe: {probed.gpu_count}")
    counts = d.verify.counts if d.verify else {}
    if counts:
        parts.append("seen by " + ", ".join(f"{k} {v}" for k, v in counts.items() if v is not None))
    return "; ".join(parts)


def stack_table(d: HostDetail) -> str:
    rows = stack_rows(d)
    if not rows:
        return '<p class="note">No versions known: the host was neither probed nor verified.</p>'
    verified = bool(d.verify and d.verify.versions)
    missing = "not verified" if not verified else "not read by the smoke job"
    out = [
        "<table><tr><th>component</th><th>locked</th><th>found on the host (smoke job)</th>"
        "<th>before this run (probe)</th></tr>"
    ]
    for r in rows:
        found = escape(r.found) if r.found is not None else f'<span class="note">{missing}</span>'
        if r.differs:
            found = f'<span class="differs">{found} ≠ locked</span>'
        out.append(
            f"<tr><td>{escape(r.item)}</td><td>{escape(r.locked or '')}</td><td>{found}</td>"
            f"<td>{escape(r.before or '')}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


# -- the checks

_RELATION = {">=": "≥", "<=": "≤", "<": "<", ">": ">", "=": "="}

# What each check of the smoke job proves, for a reader (names from provision/remote/smoke/verdict.py).
_WHAT = {
    "gpu_count": "GPUs usable by torch (NVML and lspci agree)",
    "arch": "the torch build has kernels for this GPU",
    "kernel": "a CUDA kernel runs",
    "ecc": "uncorrectable ECC errors",
    "retired_pages": "memory page retirements pending",
    "row_remap": "memory row remapping",
    "throttle": "clock slowdowns under load",
    "pcie_link": "PCIe link under load",
    "temperature": "GPU temperature",
    "gemm_bf16": "matrix multiply, bf16",
    "gemm_fp16": "matrix multiply, fp16",
    "gemm_tf32": "matrix multiply, tf32",
    "gemm_fp32": "matrix multiply, fp32",
    "copy_d2d": "GPU memory copy (device to device)",
    "copy_h2d": "copy host to GPU (PCIe)",
    "copy_d2h": "copy GPU to host (PCIe)",
    "training_loss": "training loss falls under the bound",
    "training_speed": "training throughput",
    "training_util": "GPU utilization while training",
    "ddp_local_allreduce": "all-reduce across this host's GPUs",
    "ddp_local_ddp": "DDP training across this host's GPUs",
    "multihost_allreduce": "all-reduce across hosts",
    "multihost_ddp": "DDP training across hosts",
    "tensorflow": "TensorFlow sees the GPU and multiplies",
    "jax": "JAX sees the GPU and multiplies",
}


def _what(name: str) -> str:
    if name in _WHAT:
        return _WHAT[name]
    if name.startswith("version_"):
        return f"{name.removeprefix('version_')} is the locked version"
    if name.startswith("cpu_"):
        return f"{_WHAT.get(name.removeprefix('cpu_'), name.removeprefix('cpu_'))} on the CPU (figure only)"
    if name.startswith("stage_"):
        return f"the job's {name.removeprefix('stage_')} stage ran"
    return ""


def _cell(name: str, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.6g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_cell(name, v)}" for k, v in value.items())
    if name == "version_cudnn":
        return cudnn_dotted(str(value))
    return str(value)


def pass_line(check: Check) -> str:
    """The check's pass line as a reader wants it: ``≥ 593.4``, ``< 87``, ``2.8.0 (locked)``."""
    threshold, relation = check.threshold, check.pass_if
    if threshold is None:
        return ""
    shown = _cell(check.name, threshold)
    if relation == "matches":
        return f"{shown} (locked)"
    return f"{_RELATION[relation]} {shown}" if relation in _RELATION else shown


def checks_table(checks: Sequence[Check]) -> str:
    out = [
        "<table><tr><th>check</th><th>what it proves</th><th>GPU</th><th>value</th><th>unit</th>"
        "<th>pass line</th><th>result</th><th>why it failed</th></tr>"
    ]
    for c in checks:
        name, ok, gpu = c.name, c.ok, c.gpu
        out.append(
            f'<tr class="{"" if ok else "failed"}"><td>{escape(name)}</td><td>{escape(_what(name))}</td>'
            f"<td>{'' if gpu is None else escape(str(gpu))}</td><td>{escape(_cell(name, c.value))}</td>"
            f'<td class="nowrap">{escape(c.unit or "")}</td><td class="nowrap">{escape(pass_line(c))}</td>'
            f'<td class="{"pass" if ok else "fail"}">{"pass" if ok else "FAIL"}</td>'
            f"<td>{'' if ok else escape(c.message or '')}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


# -- the section


_WHY = {
    "fail": "Why it failed",
    "no-gpu": "Why no-gpu (no usable GPU)",
    "not-run": "Why it was not run",
    "not-verified": "Why it was not verified (check mode)",
}


def host_section(d: HostDetail) -> str:
    """The host's section: heading with the verdict, why, the stack, the checks, the warnings."""
    host, verdict = d.host, str(d.verdict)
    machine = _gpus_line(d)
    parts = [
        f'<section id="host-{escape(host)}"><h2>{escape(host)}: '
        f'<span class="{escape(verdict)}">{escape(verdict)}</span></h2>',
        f'<p class="note">group {escape(str(d.group))}' + (f"; {escape(machine)}" if machine else "") + "</p>",
    ]
    why = reasons(d)
    if ran_on_cpu(d.cpu_only_check, verdict, d.failed_task):
        why.append(f"{CPU_CHECK_NOTE} (check mode)")
    if verdict == "pass":
        parts.append(f'<p><b>Verdict: <span class="pass">pass</span></b>: {escape("; ".join(why))}</p>')
    elif why:
        parts.append(f'<p><b>{escape(_WHY.get(verdict, f"Why {verdict}"))}:</b></p><ul class="why">')
        parts += [f"<li>{escape(line)}</li>" for line in why]
        parts.append("</ul>")
    if d.changes:
        parts.append(f'<p class="note">Planned changes: {escape("; ".join(d.changes))}</p>')
    parts.append("<h3>Stack</h3>")
    parts.append(stack_table(d))
    checks = d.verify.checks if d.verify else ()
    if checks:
        failed = sum(1 for c in checks if not c.ok)
        # a host that passed keeps its table folded (one click, no script): a fleet's page then
        # shows the failures first; a host that did not pass shows every check open
        summary = f"{failed} failed" if failed else "all passed"
        parts.append(
            f"<details{'' if verdict == 'pass' else ' open'}><summary><h3>Checks: {len(checks)}, {summary}</h3>"
            f"</summary>{checks_table(checks)}</details>"
        )
    elif d.verdict != "not-run":
        parts.append('<p class="note">No checks: the smoke job did not run on this host.</p>')
    warnings = d.verify.warnings if d.verify else ()
    if warnings:
        parts.append("<h3>Warnings</h3><ul>")
        parts += [f"<li>{escape(w)}</li>" for w in warnings]
        parts.append("</ul>")
    parts.append("</section>")
    return "".join(parts)


def _cache_section(cache: CacheSummary | None) -> list[str]:
    """The fleet cache's line: what the hosts got from it and what came from upstream."""
    if cache is None:
        return []
    mib = 2**20
    wheels = ", ".join(f"{k}: {v}" for k, v in cache.wheels.items()) or "none"
    out = [
        "<h2>Fleet cache</h2><table><tr><th>apt/dnf (squid)</th><th>wheelhouse</th><th>hosts</th>"
        "<th>requests / hits</th><th>served to hosts</th><th>fetched upstream</th></tr>",
        f"<tr><td>{escape(str(cache.apt))}</td><td>{escape(wheels)}</td>"
        f"<td>{escape(', '.join(cache.hosts))}</td>"
        f"<td>{cache.requests} / {cache.hits}</td><td>{cache.served_bytes / mib:.1f} MiB</td>"
        f"<td>{cache.upstream_bytes / mib:.1f} MiB</td></tr></table>",
    ]
    out += [f'<p class="note">{escape(n)}</p>' for n in cache.notes]
    return out


def _stopped(report: UpReport) -> str:
    """A --serial stop or a Ctrl-C, said where a reader looks first."""
    if report.interrupted:
        return (
            '<p class="fail">Interrupted (Ctrl-C): hosts not verified show not-run; run the same '
            "command again to complete them.</p>"
        )
    batch = report.stopped_after_batch
    if batch is None:
        return ""
    return (
        f'<p class="fail">--serial stopped the run after batch {escape(str(batch))}: a host of it '
        "did not pass, so the hosts of later batches were not run (verdict not-run).</p>"
    )


def write_html(report: UpReport, path: Path) -> Path:
    return replace_file(path, render_html(report))


def finish_reports(result: UpResult, note: Callable[[str], None] | None = None) -> None:
    """Write the run's reports; a failure to write them is a note, never an exception.

    This runs in ``up``'s ``finally``: an exception raised here would replace the one that
    stopped the run (Python drops it for the new one), and the user would read "No space left"
    instead of the host that failed. The run's outcome is already in the state DB and in what
    ``up`` returns or raises; the report is a copy of it for people.
    """
    try:
        write_reports(result)
    except Exception as exc:  # any failure: a full disk, a removed run dir, a value json refuses
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
        result.report_error = f"the report of run {result.run} was not written ({reason or type(exc).__name__})"
        (note or _note)(f"note: {result.report_error}; the outcome above stands, and `provision status` has it")


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def write_reports(result: UpResult) -> None:
    doc = result.report_json()
    # into the run dir like every file provision puts there: 0600, renamed into place (provision.files)
    replace_file(result.run_dir / "report.json", json.dumps(doc, indent=2, default=str) + "\n")
    for h in result.hosts:
        if h.verify is not None:
            replace_file(result.run_dir / f"verify-{h.host}.json", json.dumps(h.verify, indent=2) + "\n")
    # the page reads the document as report.json has it, through its one reader
    write_html(UpReport.from_json(doc), result.run_dir / "report.html")
