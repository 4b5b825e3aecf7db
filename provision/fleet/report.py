"""What `provision up` tells people: ``report.html``, one self-contained page (inline SVG plots).

The page is built from ``report.json`` (the run's document with each host's verify report) and
the run's ``events.jsonl``: a verdict table per host, GEMM and bandwidth against their pass
lines, training loss curves, GPU utilization over time, and time per role. No scripts, no
external files: it opens the same from a mail attachment as from the run dir.

:func:`finish_reports` writes a run's reports (report.json, verify-<host>.json, report.html) at
the end of `up`, a failure to write them being a note, never the run's outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.fleet.charts import bar_chart, line_chart

if TYPE_CHECKING:
    from provision.fleet.records import UpResult

_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#111827;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #d1d5db;padding:4px 8px;text-align:left}
th{background:#f3f4f6}.pass{color:#047857;font-weight:600}.fail,.not-run{color:#b91c1c;font-weight:600}
.no-gpu{color:#b45309;font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#4b5563;font-size:13px}
"""


def _checks(report: Mapping[str, Any] | None, prefix: str) -> list[Mapping[str, Any]]:
    return [c for c in (report or {}).get("checks") or [] if str(c.get("name", "")).startswith(prefix)]


def _bars(details: Iterable[Mapping[str, Any]], prefixes: tuple[str, ...]) -> list[tuple[str, float, float | None]]:
    bars: list[tuple[str, float, float | None]] = []
    for d in details:
        for prefix in prefixes:
            for c in _checks(d.get("verify"), prefix):
                if isinstance(c.get("value"), int | float):
                    threshold = c.get("threshold")
                    bars.append(
                        (
                            f"{d['host']} {c['name']}",
                            float(c["value"]),
                            float(threshold) if isinstance(threshold, int | float) else None,
                        )
                    )
    return bars


def _role_seconds(details: Iterable[Mapping[str, Any]]) -> list[tuple[str, float, float | None]]:
    totals: dict[str, float] = {}
    for d in details:
        for role, seconds in (d.get("role_seconds") or {}).items():
            totals[role] = max(totals.get(role, 0.0), float(seconds))  # the slowest host per role
    return [(role, seconds, None) for role, seconds in totals.items()]


def render_html(doc: Mapping[str, Any]) -> str:
    """The page for a report.json document (pure)."""
    details: list[Mapping[str, Any]] = list(doc.get("details") or [])
    rows = []
    for d in details:
        verdict = str(d.get("verdict"))
        note = d.get("message") or ("converged: apply skipped" if d.get("converged") else "")
        if d.get("cpu_only_check"):
            note = ("no GPU on this host: the smoke job ran on the CPU. " + str(note)).strip()
        rows.append(
            f"<tr><td>{escape(str(d['host']))}</td><td>{escape(str(d.get('group')))}</td>"
            f'<td class="{escape(verdict)}">{escape(verdict)}</td><td>{d.get("changed")}</td>'
            f"<td>{escape(str(d.get('failed_task') or ''))}</td><td>{d.get('reboots')}</td>"
            f"<td>{d.get('duration_s')}</td><td>{escape(str(note))}</td></tr>"
        )
    losses: dict[str, Sequence[float]] = {}
    util: dict[str, Sequence[float]] = {}
    for d in details:
        training = (d.get("verify") or {}).get("training") or {}
        losses[str(d["host"])] = [float(x) for x in training.get("loss_curve") or []]
        util[str(d["host"])] = [float(x) for x in training.get("gpu_util_series") or []]
    charts = [
        bar_chart("GEMM against the pass line", _bars(details, ("gemm",)), "TFLOP/s"),
        bar_chart("Bandwidth against the pass line", _bars(details, ("hbm", "memory", "pcie", "bandwidth")), "GB/s"),
        line_chart("Training loss", losses, "loss", "step (sampled)"),
        line_chart("GPU utilization during training", util, "%", "sample"),
        bar_chart("Time per role (slowest host)", _role_seconds(details), "s"),
    ]
    missing = []
    names = ("GEMM", "bandwidth", "loss curves", "GPU utilization", "time per role")
    for name, svg in zip(names, charts, strict=True):
        if not svg:
            missing.append(name)
    mode = " (check mode: nothing was changed)" if doc.get("check") else ""
    verdict = "every host passed" if doc.get("ok") else "not every host passed"
    parts = [
        '<!doctype html><html><head><meta charset="utf-8">',
        f"<title>provision up {escape(str(doc.get('run')))}</title><style>{_STYLE}</style></head><body>",
        f"<h1>provision up, run {escape(str(doc.get('run')))}{mode}: {verdict}</h1>",
        _stopped(doc),
        "<h2>Verdict per host</h2><table><tr><th>host</th><th>group</th><th>verdict</th><th>changed</th>"
        "<th>failed task</th><th>reboots</th><th>seconds</th><th>note</th></tr>",
        *rows,
        '</table><h2>Measurements</h2><div class="charts">',
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
    path.write_text(render_html(doc), encoding="utf-8")
    return path


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
    import sys

    print(text, file=sys.stderr, flush=True)


def write_reports(result: UpResult) -> None:
    doc = result.report_json()
    (result.run_dir / "report.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    for h in result.hosts:
        if h.verify is not None:
            (result.run_dir / f"verify-{h.host}.json").write_text(json.dumps(h.verify, indent=2) + "\n")
    write_html(doc, result.run_dir / "report.html")
