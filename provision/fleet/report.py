"""What `provision up` tells people: ``report.html``, one self-contained page (inline SVG plots).

The page is built from ``report.json`` (the run's document with each host's verify report): a
verdict table with each host's reason, then a section per host, then the measurements: GEMM and
copy speeds against their pass lines, training loss over the steps, GPU utilization over the
seconds of training, and time per role. No scripts, no external files: it opens the same from a
mail attachment as from the run dir.

A host's section reads one ``details`` entry (:meth:`provision.fleet.records.HostRun.detail_json`):
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
from typing import TYPE_CHECKING, Any

from provision.files import replace_file
from provision.fleet.charts import bar_chart, line_chart
from provision.fleet.verify import JOB_KEYS, HostResult, failures
from provision.model.components import COMPONENTS
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


def _speed_bars(
    details: Iterable[Mapping[str, Any]], prefixes: tuple[str, ...]
) -> list[tuple[str, float, float | None]]:
    """One bar per host, GPU and metric, labelled ``host GPU 0 gemm_bf16``."""
    bars: list[tuple[str, float, float | None]] = []
    for d in details:
        for c in (d.get("verify") or {}).get("checks") or []:
            name = str(c.get("name", ""))
            if not name.startswith(prefixes) or not isinstance(c.get("value"), int | float):
                continue
            gpu = f" GPU {c['gpu']}" if c.get("gpu") is not None else ""
            threshold = c.get("threshold")
            bars.append(
                (
                    f"{d['host']}{gpu} {name}",
                    float(c["value"]),
                    float(threshold) if isinstance(threshold, int | float) else None,
                )
            )
    return bars


def _role_seconds(details: Iterable[Mapping[str, Any]]) -> list[tuple[str, float, float | None]]:
    """Seconds per role on the slowest host, in the order the roles ran."""
    totals: dict[str, float] = {}
    for d in details:
        for role, seconds in (d.get("role_seconds") or {}).items():
            totals[role] = max(totals.get(role, 0.0), float(seconds))
    return [(role, seconds, None) for role, seconds in totals.items()]


def _same(values: Iterable[Any]) -> float | None:
    """The one value every host has (a pass line drawn once), or None when they differ."""
    found = {float(v) for v in values if isinstance(v, int | float)}
    return found.pop() if len(found) == 1 else None


def _training_charts(details: list[Mapping[str, Any]]) -> tuple[str, str]:
    """The loss over the training steps and the utilization over the seconds of the timed steps.

    A report of a job from before the steps and the sampling period were recorded plots its
    points by position, and the axis says so rather than claim steps or seconds.
    """
    losses: dict[str, list[tuple[float, float]]] = {}
    util: dict[str, list[tuple[float, float]]] = {}
    bounds, util_lines = [], []
    by_step = by_second = True
    for d in details:
        verify = d.get("verify") or {}
        training = verify.get("training") or {}
        curve = [float(x) for x in training.get("loss_curve") or []]
        steps = training.get("loss_curve_steps")
        by_step = by_step and (steps is not None or not curve)
        xs = steps if steps is not None else range(len(curve))
        losses[str(d["host"])] = [(float(x), y) for x, y in zip(xs, curve, strict=False)]
        series = [float(x) for x in training.get("gpu_util_series") or []]
        period = training.get("gpu_util_period_s")
        by_second = by_second and (period is not None or not series)
        util[str(d["host"])] = [(round(i * float(period or 1), 3), y) for i, y in enumerate(series)]
        if curve:
            bounds.append(training.get("loss_bound"))
        util_lines += [c.get("threshold") for c in verify.get("checks") or [] if c.get("name") == "training_util"]
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


def _when(seconds: object) -> str:
    if not isinstance(seconds, int | float) or not seconds:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def render_html(doc: Mapping[str, Any]) -> str:
    """The page for a report.json document (pure)."""
    details: list[Mapping[str, Any]] = list(doc.get("details") or [])
    rows = []
    for d in details:
        verdict = str(d.get("verdict"))
        why = reasons(d)
        note = why[0] + (f" (and {len(why) - 1} more below)" if len(why) > 1 else "") if why else ""
        if d.get("cpu_only_check"):
            note = ("no GPU on this host: the smoke job ran on the CPU. " + note).strip()
        host = escape(str(d["host"]))
        rows.append(
            f'<tr><td class="host"><a href="#host-{host}">{host}</a></td><td>{escape(str(d.get("group")))}</td>'
            f'<td class="{escape(verdict)}">{escape(verdict)}</td><td>{escape(note)}</td>'
            f"<td>{d.get('changed')}</td><td>{escape(str(d.get('failed_task') or ''))}</td>"
            f"<td>{d.get('reboots')}</td><td>{d.get('duration_s')}</td></tr>"
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
    mode = " (check mode: nothing was changed)" if doc.get("check") else ""
    passed = sum(1 for d in details if d.get("verdict") == "pass")
    unverified = sum(1 for d in details if d.get("verdict") == "not-verified")
    verdict = "every host passed" if doc.get("ok") else f"{passed} of {len(details)} hosts passed"
    if unverified:  # check mode with nothing to verify: not a pass, and not a failure either
        verdict = f"{passed} of {len(details)} hosts passed, {unverified} not verified (nothing installed to verify)"
    started, finished = _when(doc.get("started_at")), _when(doc.get("finished_at"))
    parts = [
        '<!doctype html><html><head><meta charset="utf-8">',
        f"<title>provision up {escape(str(doc.get('run')))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>provision up, run {escape(str(doc.get('run')))}{mode}: {verdict}</h1>",
        f'<p class="note">started {started}, finished {finished}</p>' if started and finished else "",
        _stopped(doc),
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
    parts += _cache_section(doc.get("cache"))
    parts.append("</body></html>\n")
    return "".join(parts)


# --- one host's section -------------------------------------------------------------------------

# -- the verdict and why


def reasons(d: Mapping[str, Any]) -> list[str]:
    """Why the host has its verdict, one line each, the root cause first."""
    verdict, message = d.get("verdict"), d.get("message")
    if d.get("failed_task"):
        return [f"the task {d['failed_task']!r} failed" + (f": {message}" if message else "")]
    verify = d.get("verify")
    if verify and verdict != "pass":
        lines = failures(HostResult(host=str(d["host"]), report=dict(verify)))
        error = verify.get("error") or {}
        if not verify.get("checks") and error.get("message"):  # the job gave no report: why not
            return [str(message or error["message"])]
        if lines:
            return lines
    if message:
        return [str(message)]
    if verdict == "pass":
        return ["every check passed" + (" (converged: the apply was skipped)" if d.get("converged") else "")]
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


def _before(key: str, probed: Mapping[str, Any]) -> str | None:
    """What the probe found for ``key`` before the run. Not its cuDNN: that is the system
    library's, and the locked cuDNN is the one in torch's wheels."""
    if not probed:
        return None
    if key == "cuda_toolkit":
        return ", ".join(probed.get("cuda_toolkits") or []) or NOT_INSTALLED
    if key == "driver":
        return _shown(key, probed.get(key))
    if key in ("torch", "tensorflow", "jax"):
        return _shown(key, (probed.get("frameworks") or {}).get(key))
    return None


def stack_rows(d: Mapping[str, Any]) -> list[StackRow]:
    """The versions of one host: what its lock group names, what the smoke job read after the
    run, what the probe read before it; rows nobody has a value for are left out."""
    locked: Mapping[str, str | None] = d.get("locked") or {}
    probed: Mapping[str, Any] = d.get("probed") or {}
    versions: Mapping[str, Any] = (d.get("verify") or {}).get("versions") or {}
    # every key the job reads is an observation once it ran: absent means not installed
    observed = {k: (None if versions.get(k) is None else str(versions[k])) for k in JOB_KEYS} if versions else {}
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


def _gpus_line(d: Mapping[str, Any]) -> str:
    verify = d.get("verify") or {}
    probed = d.get("probed") or {}
    gpus: Sequence[Mapping[str, Any]] = verify.get("gpus") or []
    parts = []
    if probed.get("os"):
        parts.append(f"OS {probed['os']}")
    if gpus:
        kinds: dict[str, int] = {}
        for g in gpus:
            desc = f"{g.get('name')}"
            if g.get("memory_gib"):
                desc += f", {g['memory_gib']} GiB"
            if g.get("compute_capability"):
                desc += f", compute capability {g['compute_capability']}"
            kinds[desc] = kinds.get(desc, 0) + 1
        parts.append("GPUs: " + "; ".join(f"{n} × {desc}" for desc, n in kinds.items()))
    elif probed:
        parts.append(f"GPUs found by the probe: {probed.get('gpu_count', 0)}")
    counts = verify.get("counts") or {}
    if counts:
        parts.append("seen by " + ", ".join(f"{k} {v}" for k, v in counts.items() if v is not None))
    return "; ".join(parts)


def stack_table(d: Mapping[str, Any]) -> str:
    rows = stack_rows(d)
    if not rows:
        return '<p class="note">No versions known: the host was neither probed nor verified.</p>'
    verified = bool((d.get("verify") or {}).get("versions"))
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


def pass_line(check: Mapping[str, Any]) -> str:
    """The check's pass line as a reader wants it: ``≥ 593.4``, ``< 87``, ``2.8.0 (locked)``."""
    threshold, relation = check.get("threshold"), check.get("pass_if")
    if threshold is None:
        return ""
    shown = _cell(str(check.get("name")), threshold)
    if relation == "matches":
        return f"{shown} (locked)"
    return f"{_RELATION[relation]} {shown}" if relation in _RELATION else shown


def checks_table(checks: Sequence[Mapping[str, Any]]) -> str:
    out = [
        "<table><tr><th>check</th><th>what it proves</th><th>GPU</th><th>value</th><th>unit</th>"
        "<th>pass line</th><th>result</th><th>why it failed</th></tr>"
    ]
    for c in checks:
        name = str(c.get("name"))
        ok = bool(c.get("ok"))
        gpu = c.get("gpu")
        out.append(
            f'<tr class="{"" if ok else "failed"}"><td>{escape(name)}</td><td>{escape(_what(name))}</td>'
            f"<td>{'' if gpu is None else escape(str(gpu))}</td><td>{escape(_cell(name, c.get('value')))}</td>"
            f'<td class="nowrap">{escape(str(c.get("unit") or ""))}</td><td class="nowrap">{escape(pass_line(c))}</td>'
            f'<td class="{"pass" if ok else "fail"}">{"pass" if ok else "FAIL"}</td>'
            f"<td>{'' if ok else escape(str(c.get('message') or ''))}</td></tr>"
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


def host_section(d: Mapping[str, Any]) -> str:
    """The host's section: heading with the verdict, why, the stack, the checks, the warnings."""
    host, verdict = str(d["host"]), str(d.get("verdict"))
    verify = d.get("verify") or {}
    machine = _gpus_line(d)
    parts = [
        f'<section id="host-{escape(host)}"><h2>{escape(host)}: '
        f'<span class="{escape(verdict)}">{escape(verdict)}</span></h2>',
        f'<p class="note">group {escape(str(d.get("group")))}' + (f"; {escape(machine)}" if machine else "") + "</p>",
    ]
    why = reasons(d)
    if d.get("cpu_only_check"):
        why.append("no GPU on this host: the smoke job ran on the CPU (check mode)")
    if verdict == "pass":
        parts.append(f'<p><b>Verdict: <span class="pass">pass</span></b>: {escape("; ".join(why))}</p>')
    elif why:
        parts.append(f'<p><b>{escape(_WHY.get(verdict, f"Why {verdict}"))}:</b></p><ul class="why">')
        parts += [f"<li>{escape(line)}</li>" for line in why]
        parts.append("</ul>")
    changes = d.get("changes") or []
    if changes:
        parts.append(f'<p class="note">Planned changes: {escape("; ".join(map(str, changes)))}</p>')
    parts.append("<h3>Stack</h3>")
    parts.append(stack_table(d))
    checks = verify.get("checks") or []
    if checks:
        failed = sum(1 for c in checks if not c.get("ok"))
        # a host that passed keeps its table folded (one click, no script): a fleet's page then
        # shows the failures first; a host that did not pass shows every check open
        summary = f"{failed} failed" if failed else "all passed"
        parts.append(
            f"<details{'' if verdict == 'pass' else ' open'}><summary><h3>Checks: {len(checks)}, {summary}</h3>"
            f"</summary>{checks_table(checks)}</details>"
        )
    elif d.get("verdict") != "not-run":
        parts.append('<p class="note">No checks: the smoke job did not run on this host.</p>')
    warnings = verify.get("warnings") or []
    if warnings:
        parts.append("<h3>Warnings</h3><ul>")
        parts += [f"<li>{escape(str(w.get('message')))}</li>" for w in warnings]
        parts.append("</ul>")
    parts.append("</section>")
    return "".join(parts)


def _cache_section(cache: Mapping[str, Any] | None) -> list[str]:
    """The fleet cache's line: what the hosts got from it and what came from upstream."""
    if not cache:
        return []
    mib = 2**20
    proxy = cache.get("proxy") or {}
    served = int(proxy.get("served_bytes") or 0) + int(cache.get("wheels_served_bytes") or 0)
    wheels = ", ".join(f"{k}: {v}" for k, v in (cache.get("wheels") or {}).items()) or "none"
    out = [
        "<h2>Fleet cache</h2><table><tr><th>apt/dnf (squid)</th><th>wheelhouse</th><th>hosts</th>"
        "<th>requests / hits</th><th>served to hosts</th><th>fetched upstream</th></tr>",
        f"<tr><td>{escape(str(cache.get('apt')))}</td><td>{escape(wheels)}</td>"
        f"<td>{escape(', '.join(cache.get('hosts') or []))}</td>"
        f"<td>{proxy.get('requests', 0)} / {proxy.get('hits', 0)}</td><td>{served / mib:.1f} MiB</td>"
        f"<td>{int(cache.get('upstream_bytes') or 0) / mib:.1f} MiB</td></tr></table>",
    ]
    out += [f'<p class="note">{escape(str(n))}</p>' for n in cache.get("notes") or []]
    return out


def _stopped(doc: Mapping[str, Any]) -> str:
    """A --serial stop or a Ctrl-C, said where a reader looks first."""
    if doc.get("interrupted"):
        return (
            '<p class="fail">Interrupted (Ctrl-C): hosts not verified show not-run; run the same '
            "command again to complete them.</p>"
        )
    batch = doc.get("stopped_after_batch")
    if batch is None:
        return ""
    return (
        f'<p class="fail">--serial stopped the run after batch {escape(str(batch))}: a host of it '
        "did not pass, so the hosts of later batches were not run (verdict not-run).</p>"
    )


def write_html(doc: Mapping[str, Any], path: Path) -> Path:
    return replace_file(path, render_html(doc))


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
    write_html(doc, result.run_dir / "report.html")
