"""Inline SVG charts: well-formed XML, labels escaped, failing bars marked, empty input empty, and
text that reads: every label's box, rebuilt from the emitted SVG (its position, anchor, rotation
and the estimated width of its text), overlaps no other label and no bar, and stays inside the
chart; axes carry round numbers and their units."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from provision.fleet.charts import PALETTE, bar_chart, line_chart, text_width

NS = "{http://www.w3.org/2000/svg}"

# DejaVu Sans: ascender ~0.76 em over the baseline for tall letters, descender 0.24 em under it
ASCENT, DESCENT = 0.78, 0.24


@dataclass(frozen=True)
class Box:
    what: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


def _rotate(x: float, y: float, angle: float, cx: float, cy: float) -> tuple[float, float]:
    assert angle == -90, angle  # the only rotation the charts use (the y axis title)
    return cx + (y - cy), cy - (x - cx)


def text_boxes(root: ET.Element) -> list[Box]:
    boxes = []
    for t in root.iter(f"{NS}text"):
        text = t.text or ""
        size = float(t.get("font-size", "10"))
        w = text_width(text, size, bold=t.get("font-weight") == "600")
        x, y = float(t.get("x", "0")), float(t.get("y", "0"))
        shift = {"start": 0.0, "middle": 0.5, "end": 1.0}[t.get("text-anchor", "start")]
        x0, x1, y0, y1 = x - w * shift, x - w * shift + w, y - ASCENT * size, y + DESCENT * size
        rotate = re.fullmatch(r"rotate\((\S+) (\S+) (\S+)\)", t.get("transform", ""))
        if rotate:
            angle, cx, cy = (float(v) for v in rotate.groups())
            corners = [_rotate(px, py, angle, cx, cy) for px in (x0, x1) for py in (y0, y1)]
            x0, x1 = min(c[0] for c in corners), max(c[0] for c in corners)
            y0, y1 = min(c[1] for c in corners), max(c[1] for c in corners)
        boxes.append(Box(text, x0, y0, x1, y1))
    return boxes


def mark_boxes(root: ET.Element) -> list[Box]:
    """The bars and the pass-line marks across them (the marks are lines with a title)."""
    boxes = [
        Box(
            "bar",
            float(r.get("x", "0")),
            float(r.get("y", "0")),
            float(r.get("x", "0")) + float(r.get("width", "0")),
            float(r.get("y", "0")) + float(r.get("height", "0")),
        )
        for r in root.iter(f"{NS}rect")
    ]
    for line in root.iter(f"{NS}line"):
        if line.find(f"{NS}title") is not None and line.get("x1") == line.get("x2"):
            x, y1, y2 = float(line.get("x1", "0")), float(line.get("y1", "0")), float(line.get("y2", "0"))
            boxes.append(Box("pass line mark", x - 1, min(y1, y2), x + 1, max(y1, y2)))
    return boxes


def assert_reads(svg: str) -> ET.Element:
    """No two labels overlap, no label overlaps a bar or a pass-line mark, all of it inside the chart."""
    root = ET.fromstring(svg)
    width, height = float(root.get("width", "0")), float(root.get("height", "0"))
    texts = text_boxes(root)
    assert texts
    for i, a in enumerate(texts):
        assert a.x0 >= 0 and a.x1 <= width and a.y0 >= 0 and a.y1 <= height, f"{a} outside {width}x{height}"
        for b in texts[i + 1 :]:
            assert not a.overlaps(b), f"{a} overlaps {b}"
        for bar in mark_boxes(root):
            assert not a.overlaps(bar), f"{a} overlaps {bar}"
    return root


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text")]


def axis_numbers(root: ET.Element, along: str) -> list[float]:
    """The tick numbers of the x axis (``along="x"``: the largest row of numbers at one y) or the
    y axis (``"y"``: the largest column of numbers at one x)."""
    groups: dict[str, list[float]] = {}
    for t in root.iter(f"{NS}text"):
        if re.fullmatch(r"-?\d[\d,]*(\.\d+)?", t.text or ""):
            key = t.get("y" if along == "x" else "x", "")
            groups.setdefault(key, []).append(float((t.text or "").replace(",", "")))
    return max(groups.values(), key=len)


def assert_round_axis(ticks: list[float], lo: float, hi: float) -> None:
    """1/2/5 x 10^k steps from at or below ``lo`` to at or above ``hi``."""
    assert len(ticks) >= 2 and ticks[0] <= lo and ticks[-1] >= hi, (ticks, lo, hi)
    step = ticks[1] - ticks[0]
    assert re.fullmatch(r"0\.0*[125]|[125]0*", f"{step:.10g}"), ticks
    assert all(b - a == pytest.approx(step) for a, b in itertools.pairwise(ticks)), ticks


def test_bar_chart_marks_bars_under_their_pass_line() -> None:
    svg = bar_chart("GEMM <bf16>", [("gpu0", 700.0, 592.0), ("gpu1", 500.0, 592.0), ("cpu", 1.0, None)], "TFLOP/s")
    root = assert_reads(svg)
    bars = [r for r in root.findall(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert [r.get("fill") for r in bars] == [PALETTE[0], PALETTE[1], PALETTE[0]]
    marks = [line for line in root.findall(f"{NS}line") if line.find(f"{NS}title") is not None]
    assert [m.findtext(f"{NS}title") for m in marks] == ["pass line 592", "pass line 592"]
    assert root.get("aria-label") == "GEMM <bf16>"  # escaped in the text, intact once parsed
    texts = _texts(root)
    assert "TFLOP/s" in texts  # the value axis says its unit
    assert_round_axis(axis_numbers(root, "x"), 0.0, 700.0)
    assert {"below the pass line", "pass line"} <= set(texts)  # the legend explains red and the dashes


@pytest.mark.parametrize("value", [0.0, 380.0, 560.0, 590.0, 600.0, 700.0, 1400.0])
def test_a_value_is_written_beside_its_bar_never_on_the_pass_line(value: float) -> None:
    root = assert_reads(bar_chart("GEMM", [("gpu0", value, 593.4), ("gpu1", 742.0, 593.4)], "TFLOP/s"))
    assert _texts(root).count(f"{value:,.0f}" if value else "0") >= 1


def test_many_roles_with_long_names_stack_without_touching() -> None:
    roles = [
        ("preflight", 6.2),
        ("signed_repo", 3.1),
        ("package_plan", 2.4),
        ("nvidia_driver", 212.5),
        ("fabric_manager", 18.0),
        ("cuda_toolkit", 96.3),
        ("cudnn", 41.7),
        ("container_toolkit", 22.9),
        ("dcgm", 9.4),
        ("python_env", 14.8),
        ("frameworks", 143.6),
        ("verify", 3.2),
        ("site_mirror_and_proxy_configuration_for_air_gapped_hosts", 31.0),
        ("organisation.infrastructure.nvidia_container_runtime_configuration", 12.5),
        ("x" * 90, 1.0),  # one word wider than the label column: broken inside the word
    ]
    svg = bar_chart("Time per role (slowest host)", [(r, s, None) for r, s in roles], "seconds")
    root = assert_reads(svg)
    texts = _texts(root)
    assert "preflight" in texts and "seconds" in texts
    assert "site_mirror_and_proxy_configuration_for_air_gapped_hosts" not in texts  # wrapped onto lines
    assert any(t.startswith("site_mirror_") for t in texts)
    assert_round_axis(axis_numbers(root, "x"), 0.0, 212.5)  # the axis covers the slowest role


def test_a_title_wider_than_the_chart_wraps() -> None:
    title = "Matrix multiply (GEMM) per GPU against its pass line, for every host of a large fleet of machines"
    assert_reads(bar_chart(title, [("a", 1.0, None)], "TFLOP/s"))


def test_line_chart_has_numbered_labelled_axes_and_a_legend_below() -> None:
    steps = list(range(1, 201, 4))
    series = {
        "gpu-node-a01": [(float(s), 2.31 * 0.982**s) for s in steps],
        "gpu-node-a02": [(float(s), 2.28 * 0.975**s) for s in steps],
        "cpu-builder-1": [(float(s), 2.35 * 0.93**s) for s in range(1, 31)],
        "empty": [],
    }
    svg = line_chart("Training loss", series, "loss", "training step", hline=0.5, hline_label="pass bound")
    root = assert_reads(svg)
    assert len(root.findall(f"{NS}polyline")) == 3
    texts = _texts(root)
    assert {"loss", "training step"} <= set(texts)  # both axes are named
    assert_round_axis(axis_numbers(root, "x"), 1.0, 197.0)  # steps: the x axis has numbers
    assert_round_axis(axis_numbers(root, "y"), 0.0, 2.35)  # and so has the y axis
    assert {"gpu-node-a01", "gpu-node-a02", "cpu-builder-1", "pass bound (0.5)"} <= set(texts)
    plot_bottom = max(float(p.split(",")[1]) for p in root.findall(f"{NS}polyline")[0].get("points", "").split())
    legend_y = [float(t.get("y", "0")) for t in root.iter(f"{NS}text") if t.text == "gpu-node-a01"]
    assert legend_y[0] > plot_bottom  # the legend sits under the plot, never on a line


@pytest.mark.parametrize("count", [1, 4, 12])
def test_a_legend_of_many_long_names_wraps_inside_the_chart(count: int) -> None:
    series = {
        f"gpu-node-{i:02d}.rack-7.datacenter.example.internal": [(0.0, 10.0 + i), (1.2, 90.0)] for i in range(count)
    }
    root = assert_reads(line_chart("GPU utilization", series, "utilization (%)", "seconds", hline=70.0, y_max=100.0))
    assert axis_numbers(root, "y")[-1] == 100.0  # a percentage axis ends at 100


def test_big_and_small_numbers_keep_their_labels_apart() -> None:
    root = assert_reads(line_chart("x", {"a": [(0.0, 0.0), (1_250_000.0, 3e-3)]}, "y", "x"))
    assert_round_axis(axis_numbers(root, "x"), 0.0, 1_250_000.0)
    assert_round_axis(axis_numbers(root, "y"), 0.0, 3e-3)
    bars = [(f"host{i} GPU {i % 8} copy_d2d", 2850.0 + i * 9000, 2010.0) for i in range(20)]
    root = assert_reads(bar_chart("copies", bars, "GB/s"))
    assert_round_axis(axis_numbers(root, "x"), 0.0, bars[-1][1])


def test_no_data_gives_no_chart() -> None:
    assert bar_chart("x", [], "u") == ""
    assert line_chart("x", {"a": []}, "y", "x") == ""
