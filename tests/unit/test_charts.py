"""Inline SVG charts: well-formed XML, labels escaped, failing bars marked, empty input empty."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from provision.fleet.charts import PALETTE, bar_chart, line_chart

NS = "{http://www.w3.org/2000/svg}"


def test_bar_chart_marks_bars_under_their_pass_line() -> None:
    svg = bar_chart("GEMM <bf16>", [("gpu0", 700.0, 592.0), ("gpu1", 500.0, 592.0), ("cpu", 1.0, None)], "TFLOP/s")
    root = ET.fromstring(svg)
    rects = root.findall(f"{NS}rect")
    assert [r.get("fill") for r in rects] == [PALETTE[0], PALETTE[1], PALETTE[0]]
    assert len([line for line in root.findall(f"{NS}line") if line.get("stroke-dasharray")]) == 2
    assert root.get("aria-label") == "GEMM <bf16>"  # escaped in the text, intact once parsed


def test_line_chart_draws_one_line_per_series() -> None:
    svg = line_chart("loss", {"th1": [2.3, 1.0, 0.4], "th2": [2.2, 0.9], "empty": []}, "loss", "step", hline=70.0)
    root = ET.fromstring(svg)
    lines = root.findall(f"{NS}polyline")
    assert len(lines) == 2
    assert len(lines[0].get("points", "").split()) == 3


def test_no_data_gives_no_chart() -> None:
    assert bar_chart("x", [], "u") == ""
    assert line_chart("x", {"a": []}, "y", "x") == ""
