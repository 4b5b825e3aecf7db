"""Small inline SVG charts for self-contained HTML reports (no plotting library on controllers).

Pure functions from numbers to SVG text; every label is escaped. Used by report.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 560, 220
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 16, 28, 40
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d")


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _frame(title: str, body: list[str], y_max: float, y_label: str) -> str:
    plot_h = HEIGHT - MARGIN_T - MARGIN_B
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    for i in range(5):  # horizontal grid with values
        value = y_max * i / 4
        y = MARGIN_T + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        parts.append(f'<text x="{MARGIN_L - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{_fmt(value)}</text>')
    parts.append(
        f'<text x="12" y="{MARGIN_T + plot_h / 2}" font-size="10" text-anchor="middle" '
        f'transform="rotate(-90 12 {MARGIN_T + plot_h / 2})">{escape(y_label)}</text>'
    )
    parts += body
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, bars: Sequence[tuple[str, float, float | None]], unit: str) -> str:
    """Bars ``(label, value, pass_line)``; a pass line is drawn as a dashed mark over its bar."""
    if not bars:
        return ""
    y_max = max(max(v, t or 0.0) for _, v, t in bars) * 1.15 or 1.0
    plot_w = WIDTH - MARGIN_L - MARGIN_R
    plot_h = HEIGHT - MARGIN_T - MARGIN_B
    slot = plot_w / len(bars)
    body = []
    for i, (label, value, threshold) in enumerate(bars):
        x = MARGIN_L + i * slot + slot * 0.2
        w = slot * 0.6
        h = plot_h * value / y_max
        ok = threshold is None or value >= threshold
        color = PALETTE[0] if ok else PALETTE[1]
        body.append(
            f'<rect x="{x:.1f}" y="{MARGIN_T + plot_h - h:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'fill="{color}"><title>{escape(label)}: {_fmt(value)} {escape(unit)}</title></rect>'
        )
        body.append(
            f'<text x="{x + w / 2:.1f}" y="{MARGIN_T + plot_h - h - 4:.1f}" text-anchor="middle" '
            f'font-size="10">{_fmt(value)}</text>'
        )
        if threshold is not None:
            ty = MARGIN_T + plot_h - plot_h * threshold / y_max
            body.append(
                f'<line x1="{x - 4:.1f}" x2="{x + w + 4:.1f}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#111827" '
                f'stroke-dasharray="4 3" stroke-width="2"><title>pass line {_fmt(threshold)}</title></line>'
            )
        body.append(
            f'<text x="{x + w / 2:.1f}" y="{HEIGHT - MARGIN_B + 14}" text-anchor="middle" '
            f'font-size="10">{escape(label[:18])}</text>'
        )
    return _frame(title, body, y_max, unit)


def line_chart(
    title: str, series: dict[str, Sequence[float]], y_label: str, x_label: str, hline: float | None = None
) -> str:
    """One line per series over its sample index; ``hline`` draws a dashed reference level."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    y_max = max(max(v) for v in series.values())
    y_max = max(y_max, hline or 0.0) * 1.1 or 1.0
    n_max = max(len(v) for v in series.values())
    plot_w = WIDTH - MARGIN_L - MARGIN_R
    plot_h = HEIGHT - MARGIN_T - MARGIN_B
    body = []
    for index, (name, values) in enumerate(series.items()):
        step = plot_w / max(n_max - 1, 1)
        points = " ".join(
            f"{MARGIN_L + i * step:.1f},{MARGIN_T + plot_h - plot_h * v / y_max:.1f}" for i, v in enumerate(values)
        )
        color = PALETTE[index % len(PALETTE)]
        body.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{points}">'
            f"<title>{escape(name)}</title></polyline>"
        )
        body.append(
            f'<text x="{WIDTH - MARGIN_R}" y="{MARGIN_T + 12 + 12 * index}" text-anchor="end" '
            f'font-size="10" fill="{color}">{escape(name)}</text>'
        )
    if hline is not None:
        y = MARGIN_T + plot_h - plot_h * hline / y_max
        body.append(
            f'<line x1="{MARGIN_L}" x2="{WIDTH - MARGIN_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#111827" '
            f'stroke-dasharray="4 3"/>'
        )
    body.append(
        f'<text x="{MARGIN_L + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle" '
        f'font-size="10">{escape(x_label)}</text>'
    )
    return _frame(title, body, y_max, y_label)
