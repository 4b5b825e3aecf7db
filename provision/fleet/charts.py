"""Small inline SVG charts for self-contained HTML reports (no plotting library on controllers).

Pure functions from numbers to SVG text; every label is escaped. Used by report.py.

Two kinds: horizontal bars (one row per label, so long and many labels stack instead of
colliding; a pass line is a dashed mark across its bar) and lines over a numeric x axis. Both
have round ticks (1, 2 or 5 x 10^k) on labelled axes and put legends below the plot, never over
it. Each piece of text is its own ``<text>`` element at an explicit position, so tests can rebuild
every label's box from the SVG and prove that none overlap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from html import escape

# --- layout: where text goes -----------------------------------------------------------------
#
# The charts are SVG written without a browser to measure text, so every layout decision uses
# text_width, an estimate never narrower than the font the charts ask for (FONT): DejaVu Sans
# first, then Verdana, both wide sans faces; a narrower fallback (Arial, Helvetica) only leaves
# more room.

FONT = "DejaVu Sans, Verdana, sans-serif"

# Advance widths in em, rounded up per class from DejaVu Sans Book's hmtx table
# (DejaVuSans.ttf, version 2.37: i/j/l 0.28, space 0.32, f 0.35, t 0.39, r 0.41, lower case up to
# 0.63 except m 0.97 and w 0.82, digits 0.64, upper case up to 0.79 except M 0.86 and W 0.99,
# %@ 1.0). tests/unit/fleet/test_chart_layout.py checks the bound against the font file when it is installed.
_NARROW = frozenset(" '.,:;|!/\\ijlIJ")
_SLIM = frozenset("ft()[]-r")
_WIDE = frozenset("mwMW%@")
_BOLD = 1.18  # DejaVu Sans Bold: at most 17.5% wider than the classes above (r: 0.49)


def char_width(c: str) -> float:
    """One character's advance in em (an upper bound for DejaVu Sans)."""
    if c in _NARROW:
        return 0.41
    if c in _SLIM:
        return 0.42
    if c in _WIDE:
        return 1.0
    if c.islower() or c.isdigit():
        return 0.64
    if c.isupper():
        return 0.80
    return 0.85  # punctuation and symbols (#+<=>^~ are 0.84), and anything else


def text_width(text: str, size: float, bold: bool = False) -> float:
    """The estimated width in pixels of ``text`` at font size ``size`` (never less than it renders)."""
    return sum(char_width(c) for c in text) * size * (_BOLD if bold else 1.0)


# --- ticks ------------------------------------------------------------------------------------


def nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 x 10^k that is at least ``raw`` (> 0)."""
    exponent = math.floor(math.log10(raw))
    for mantissa in (1, 2, 5, 10):
        step = mantissa * 10.0**exponent
        if step >= raw * (1 - 1e-9):
            return step
    raise AssertionError("unreachable: 10 x 10^k >= raw")


def _next_step(step: float) -> float:
    """The 1/2/5 step after ``step``."""
    return nice_step(step * 1.5)


def same_value(lo: float, hi: float) -> bool:
    """One value for an axis: equal, or a billionth of their size apart, which no round step of a
    float splits at that magnitude (1e7 and 1e7 + 2e-9 gave the ticks 1e7, 1e7, 1e7 + 2e-9)."""
    return abs(hi - lo) <= 1e-9 * max(abs(lo), abs(hi))


def nice_ticks(lo: float, hi: float, max_ticks: int = 6) -> list[float]:
    """Round tick values (multiples of a 1/2/5 x 10^k step) from at or below ``lo`` to at or above
    ``hi``, at most ``max_ticks`` of them (at least 2; 3 for a range across zero, which is a tick)."""
    if hi < lo:
        lo, hi = hi, lo
    max_ticks = max(3 if lo < 0 < hi else 2, max_ticks)
    if same_value(lo, hi):  # a unit around it (0..1 for zeros)
        hi = lo + (abs(lo) or 1.0)
    step = nice_step((hi - lo) / (max_ticks - 1))
    while True:
        decimals = max(0, -math.floor(math.log10(step))) + 1

        def tick(i: int, step: float = step, decimals: int = decimals) -> float:
            return round(i * step, decimals)  # 0.1 * 3 is 0.30000000000000004: the tick is 0.3

        # the tolerance keeps 0.3 / 0.1 = 2.9999999999999996 from adding a tick; the checks
        # after it keep the data inside the ticks whatever the tolerance did
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        first -= tick(first) > lo
        last += tick(last) < hi
        if last - first + 1 <= max_ticks:
            return [tick(i) for i in range(first, last + 1)]
        step = _next_step(step)


def tick_label(value: float, ticks: list[float]) -> str:
    """``value`` with as many decimals as its axis's step needs, thousands grouped (``12,000``)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    text = f"{value:,.{decimals}f}"
    return "0" if float(value) == 0 else text


def fit_ticks(lo: float, hi: float, length: float, size: float, horizontal: bool) -> list[float]:
    """The most ticks (up to 8) whose labels fit ``length`` pixels without touching.

    Along a horizontal axis each label needs its width plus a gap; along a vertical one a line
    of text plus a gap.
    """
    for count in range(8, 1, -1):
        ticks = nice_ticks(lo, hi, count)
        room = length / (len(ticks) - 1)
        widest = max(text_width(tick_label(t, ticks), size) for t in ticks) if horizontal else 0.0
        need = widest + size * 0.8 if horizontal else size * 1.8
        if need <= room:
            return ticks
    return nice_ticks(lo, hi, 2)


# --- labels -----------------------------------------------------------------------------------

_BREAK = re.compile(r"(?<=[_\-./ ])")  # break after a separator, keeping it on the first line


def wrap_label(text: str, size: float, width: float, bold: bool = False) -> list[str]:
    """``text`` in lines no wider than ``width``: broken after ``_ - . /`` or spaces, and inside a
    word only where one word alone is wider than ``width``."""
    if text_width(text, size, bold) <= width:
        return [text]
    pieces: list[str] = []
    for word in _BREAK.split(text):
        rest = word
        while text_width(rest, size, bold) > width and len(rest) > 1:  # a word wider than the line
            cut = len(rest) - 1
            while cut > 1 and text_width(rest[:cut], size, bold) > width:
                cut -= 1
            pieces.append(rest[:cut])
            rest = rest[cut:]
        if rest:
            pieces.append(rest)
    lines: list[str] = []
    for piece in pieces:
        if lines and text_width(lines[-1] + piece, size, bold) <= width:
            lines[-1] += piece
        else:
            lines.append(piece)
    return [line.rstrip() for line in lines]


# --- the charts ------------------------------------------------------------------------------

WIDTH = 560
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d")
FAIL = PALETTE[1]
TITLE_SIZE, LABEL_SIZE, TICK_SIZE = 13, 11, 10
PAD = 8
INK, GRID, MUTED = "#111827", "#e5e7eb", "#4b5563"


def _text(x: float, y: float, text: str, size: float, anchor: str = "start", **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>{escape(text)}</text>'


def _title(title: str) -> tuple[list[str], float]:
    """The title, wrapped to the chart's width, and the y where the plot may start."""
    lines = wrap_label(title, TITLE_SIZE, WIDTH - 2 * PAD, bold=True)
    parts = [
        _text(WIDTH / 2, 16 + i * 16, line, TITLE_SIZE, "middle", font_weight="600") for i, line in enumerate(lines)
    ]
    return parts, 16 + (len(lines) - 1) * 16 + 14


def _svg(title: str, height: float, body: list[str]) -> str:
    return "".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{escape(title)}" '
            f'font-family="{FONT}" fill="{INK}">',
            *body,
            "</svg>",
        ]
    )


def _value(value: float) -> str:
    """A measured figure, as precise as it is worth reading."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.3g}"


def _legend(items: Sequence[tuple[str, str]], top: float) -> tuple[list[str], float]:
    """Legend entries ``(swatch, text)`` flowed left to right under the plot, wrapping at the
    chart's width; a swatch is ``"dash"`` (the pass line), ``"line:<colour>"`` (a series) or a
    fill colour. Returns the SVG and the y below it."""
    parts: list[str] = []
    x, y = float(PAD), top + TICK_SIZE
    for swatch, label in items:
        w = 18 + text_width(label, TICK_SIZE)
        if x > PAD and x + w > WIDTH - PAD:
            x, y = PAD, y + 16
        if swatch == "dash" or swatch.startswith("line:"):
            style = 'stroke-dasharray="4 3"' if swatch == "dash" else 'stroke-width="2.5"'
            colour = INK if swatch == "dash" else swatch.removeprefix("line:")
            parts.append(
                f'<line x1="{x:.1f}" x2="{x + 14:.1f}" y1="{y - 4:.1f}" y2="{y - 4:.1f}" stroke="{colour}" {style}/>'
            )
        else:
            parts.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" fill="{swatch}"/>')
        parts.append(_text(x + 18, y, label, TICK_SIZE))
        x += w + 14
    return parts, y + 6


def bar_chart(title: str, bars: Sequence[tuple[str, float, float | None]], unit: str) -> str:
    """Horizontal bars ``(label, value, pass_line)``, one row each, values on a round axis in
    ``unit``. A bar under its pass line is red; the pass line is a dashed mark across the bar.

    Labels sit in a column left of the bars, as wide as the longest (up to 40% of the chart),
    wrapped onto more lines beyond that; a row is as tall as its label.
    """
    if not bars:
        return ""
    body, top = _title(title)
    label_w = min(max(text_width(label, LABEL_SIZE) for label, _, _ in bars), WIDTH * 0.4)
    wrapped = [wrap_label(label, LABEL_SIZE, label_w) for label, _, _ in bars]
    value_w = max(text_width(_value(v), TICK_SIZE) for _, v, _ in bars)
    x0 = PAD + label_w + PAD
    x1 = WIDTH - PAD - value_w - 6  # room for the value written after the longest bar
    hi = max(max(v, t or 0.0) for _, v, t in bars)
    ticks = fit_ticks(0.0, hi, x1 - x0, TICK_SIZE, horizontal=True)
    scale = (x1 - x0) / (ticks[-1] - ticks[0])
    rows_top = top + 6
    heights = [max(20.0, 13.0 * len(lines) + 7) for lines in wrapped]
    rows_bottom = rows_top + sum(heights)
    for t in ticks:  # the grid first, under the bars
        gx = x0 + (t - ticks[0]) * scale
        body.append(f'<line x1="{gx:.1f}" x2="{gx:.1f}" y1="{rows_top:.1f}" y2="{rows_bottom:.1f}" stroke="{GRID}"/>')
    y = rows_top
    for (label, value, threshold), lines, h in zip(bars, wrapped, heights, strict=True):
        ok = threshold is None or value >= threshold
        bar_h = min(14.0, h - 6)
        by = y + (h - bar_h) / 2
        end = x0 + (value - ticks[0]) * scale
        body.append(
            f'<rect x="{x0:.1f}" y="{by:.1f}" width="{max(end - x0, 0.5):.1f}" height="{bar_h:.1f}" '
            f'fill="{PALETTE[0] if ok else FAIL}"><title>{escape(label)}: {_value(value)} {escape(unit)}'
            + (f" (pass line {_value(threshold)})" if threshold is not None else "")
            + "</title></rect>"
        )
        label_top = y + (h - 13.0 * len(lines)) / 2 + 10
        body += [_text(x0 - PAD, label_top + 13 * i, line, LABEL_SIZE, "end") for i, line in enumerate(lines)]
        label_x = end + 4
        if threshold is not None:
            tx = x0 + (threshold - ticks[0]) * scale
            if label_x - 4 <= tx <= label_x + text_width(_value(value), TICK_SIZE) + 4:
                label_x = max(end, tx + 1) + 4  # the value would sit on the pass line's mark: after it
            body.append(
                f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{by - 3:.1f}" y2="{by + bar_h + 3:.1f}" stroke="{INK}" '
                f'stroke-dasharray="3 2" stroke-width="2"><title>pass line {_value(threshold)}</title></line>'
            )
        body.append(_text(label_x, by + bar_h / 2 + 3.5, _value(value), TICK_SIZE))
        y += h
    body.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{rows_bottom:.1f}" y2="{rows_bottom:.1f}" stroke="{INK}"/>')
    body += [
        _text(x0 + (t - ticks[0]) * scale, rows_bottom + 13, tick_label(t, ticks), TICK_SIZE, "middle") for t in ticks
    ]
    body.append(_text((x0 + x1) / 2, rows_bottom + 28, unit, LABEL_SIZE, "middle"))
    bottom = rows_bottom + 34
    if any(t is not None for _, _, t in bars):
        legend, bottom = _legend(
            [(PALETTE[0], "at or above the pass line"), (FAIL, "below the pass line"), ("dash", "pass line")], bottom
        )
        body += legend
    return _svg(title, bottom + 4, body)


def line_chart(
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    y_label: str,
    x_label: str,
    *,
    hline: float | None = None,
    hline_label: str = "pass line",
    y_max: float | None = None,
) -> str:
    """One line per series of ``(x, y)`` points, y from 0 (``y_max`` fixes the top, e.g. 100 %);
    ``hline`` draws a dashed reference level, named in the legend with its value."""
    series = {k: list(v) for k, v in series.items() if v}
    if not series:
        return ""
    body, top = _title(title)
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts] + ([hline] if hline is not None else [])
    plot_top, plot_h = top + 8, 150.0
    y_ticks = fit_ticks(min(0.0, *ys), y_max if y_max is not None else max(ys), plot_h, TICK_SIZE, False)
    y_tick_w = max(text_width(tick_label(t, y_ticks), TICK_SIZE) for t in y_ticks)
    x0 = PAD + LABEL_SIZE + 6 + y_tick_w + 6  # the rotated y label, the tick labels, a gap
    x1: float = WIDTH - PAD - 12
    x_ticks = fit_ticks(min(xs), max(xs), x1 - x0, TICK_SIZE, horizontal=True)
    # the last x tick label is centred on the plot's right edge: leave room for its right half
    x1 = WIDTH - PAD - max(12.0, text_width(tick_label(x_ticks[-1], x_ticks), TICK_SIZE) / 2)
    x_ticks = fit_ticks(min(xs), max(xs), x1 - x0, TICK_SIZE, horizontal=True)
    plot_bottom = plot_top + plot_h

    def px(x: float) -> float:
        return x0 + (x - x_ticks[0]) / (x_ticks[-1] - x_ticks[0]) * (x1 - x0)

    def py(y: float) -> float:
        return plot_bottom - (y - y_ticks[0]) / (y_ticks[-1] - y_ticks[0]) * plot_h

    for t in y_ticks:
        body.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="{GRID}"/>')
        body.append(_text(x0 - 6, py(t) + 3.5, tick_label(t, y_ticks), TICK_SIZE, "end"))
    for t in x_ticks:
        tx = px(t)
        body.append(
            f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{plot_bottom:.1f}" y2="{plot_bottom + 4:.1f}" stroke="{INK}"/>'
        )
        body.append(_text(px(t), plot_bottom + 15, tick_label(t, x_ticks), TICK_SIZE, "middle"))
    body.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{plot_bottom:.1f}" y2="{plot_bottom:.1f}" stroke="{INK}"/>')
    body.append(f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="{plot_top:.1f}" y2="{plot_bottom:.1f}" stroke="{INK}"/>')
    mid = plot_top + plot_h / 2
    lx = PAD + LABEL_SIZE - 2
    body.append(_text(lx, mid, y_label, LABEL_SIZE, "middle", transform=f"rotate(-90 {lx:.1f} {mid:.1f})"))
    body.append(_text((x0 + x1) / 2, plot_bottom + 31, x_label, LABEL_SIZE, "middle"))
    legend: list[tuple[str, str]] = []
    for index, (name, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        body.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{coords}">'
            f"<title>{escape(name)}</title></polyline>"
        )
        legend.append((f"line:{color}", name))
    if hline is not None:
        body.append(
            f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{py(hline):.1f}" y2="{py(hline):.1f}" stroke="{INK}" '
            f'stroke-dasharray="4 3"><title>{escape(hline_label)} {_value(hline)}</title></line>'
        )
        legend.append(("dash", f"{hline_label} ({_value(hline)})"))
    parts, bottom = _legend(legend, plot_bottom + 38)
    return _svg(title, bottom + 4, body + parts)
