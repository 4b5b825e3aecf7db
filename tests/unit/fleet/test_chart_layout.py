"""The charts' layout rules: round ticks that cover the data, tick labels that fit, wrapped labels,
and a text width estimate that is never narrower than the font the charts ask for."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from provision.fleet.charts import (
    fit_ticks,
    nice_step,
    nice_ticks,
    same_value,
    text_width,
    tick_label,
    wrap_label,
)
from tests.prereq import missing

RANGES = [
    (0.0, 1.0),
    (0.0, 742.5),
    (0.0, 2850.0),
    (0.0, 53.1),
    (0.0, 212.5),
    (0.042, 2.31),
    (0.0, 0.0031),
    (1.0, 200.0),
    (-3.7, 12.2),
    (0.0, 1.1),
    (5.0, 5.0),  # one value
    (0.0, 0.0),  # all zero
    (97.0, 99.0),
    (0.0, 1_234_567.0),
    (1e-6, 3e-6),
]


def _round_step(measured: float, rel: float) -> float | None:
    """The 1, 2 or 5 x 10^k that ``measured`` is, within ``rel``; None when it is none of them."""
    k = math.floor(math.log10(measured))
    near = (m * 10.0**e for e in (k - 1, k, k + 1) for m in (1, 2, 5))
    return next((s for s in near if math.isclose(measured, s, rel_tol=rel)), None)


def assert_nice(lo: float, hi: float, max_ticks: int) -> None:
    ticks = nice_ticks(lo, hi, max_ticks)
    assert 2 <= len(ticks) <= max(max_ticks, 3 if lo < 0 < hi else 2)  # zero is a tick between
    assert ticks[0] <= lo and ticks[-1] >= hi  # the data is inside the axis
    fuzz = 1e-12 * max(abs(t) for t in ticks)  # a float's own precision at the axis's magnitude
    measured = ticks[1] - ticks[0]
    assert measured > 0, ticks
    # 1, 2 or 5 x 10^k, as far as floats tell at this magnitude (0.1 apart at 1e7 measures 0.09999999963)
    step = _round_step(measured, rel=1e-9 + 2 * fuzz / measured)
    assert step is not None, (ticks, measured)
    for a, b in itertools.pairwise(ticks):
        assert b - a == pytest.approx(step, rel=1e-9, abs=2 * fuzz)
    for t in ticks:  # every tick a whole multiple of the step: 0.30000000000000004 would fail here
        assert t / step == pytest.approx(round(t / step), abs=1e-9 + fuzz / step)
        assert t == float(f"{t:.12g}")
    if len(ticks) > 2 and not same_value(lo, hi):  # no wasted step at either end (one value: a unit around it)
        assert ticks[1] > lo and ticks[-2] < hi


@pytest.mark.parametrize(("lo", "hi"), RANGES)
@pytest.mark.parametrize("max_ticks", [2, 3, 5, 6, 8])
def test_ticks_are_round_evenly_spaced_and_cover_the_data(lo: float, hi: float, max_ticks: int) -> None:
    assert_nice(lo, hi, max_ticks)


# what a chart's data can be: measured figures from a millionth to millions, either sign
figures = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False).filter(lambda v: v == 0 or abs(v) >= 1e-6)


@settings(max_examples=300, deadline=None)
@given(a=figures, b=figures, max_ticks=st.integers(min_value=2, max_value=10))
@example(a=-10000000.0, b=-9999999.999999998, max_ticks=3)  # found by this test: two equal ticks
@example(a=-10000000.0, b=-9999999.875, max_ticks=3)  # found by this test: a step of 0.1 at 1e7
def test_any_range_gets_round_ticks_that_cover_it(a: float, b: float, max_ticks: int) -> None:
    lo, hi = min(a, b), max(a, b)
    assert_nice(lo, hi, max_ticks)


def test_a_step_is_the_next_round_number() -> None:
    assert [nice_step(x) for x in (0.7, 1.0, 1.2, 2.0, 2.1, 4.9, 5.01, 9.0, 0.013, 130.0)] == pytest.approx(
        [1.0, 1.0, 2.0, 2.0, 5.0, 5.0, 10.0, 10.0, 0.02, 200.0]
    )


def test_tick_labels_share_their_decimals_and_group_thousands() -> None:
    ticks = nice_ticks(0.0, 2.31, 6)
    assert [tick_label(t, ticks) for t in ticks] == ["0", "0.5", "1.0", "1.5", "2.0", "2.5"]
    big = nice_ticks(0.0, 2850.0, 7)
    assert [tick_label(t, big) for t in big] == ["0", "500", "1,000", "1,500", "2,000", "2,500", "3,000"]
    small = nice_ticks(0.0, 0.0031, 5)
    assert tick_label(small[1], small) == "0.001"


@pytest.mark.parametrize(("lo", "hi"), [r for r in RANGES if r[1] > r[0]])
@pytest.mark.parametrize("length", [120.0, 300.0, 480.0])
def test_fitted_tick_labels_never_touch(lo: float, hi: float, length: float) -> None:
    size = 10
    ticks = fit_ticks(lo, hi, length, size, horizontal=True)
    spacing = length / (len(ticks) - 1)
    widths = [text_width(tick_label(t, ticks), size) for t in ticks]
    if len(ticks) > 2:  # fewer ticks are only given up when even two do not fit
        assert all((a + b) / 2 < spacing for a, b in itertools.pairwise(widths))
    vertical = fit_ticks(lo, hi, length, size, horizontal=False)
    assert len(vertical) == 2 or length / (len(vertical) - 1) >= size * 1.8


def test_more_room_gives_more_ticks() -> None:
    assert len(fit_ticks(0, 2850, 480, 10, horizontal=True)) > len(fit_ticks(0, 2850, 120, 10, horizontal=True))


@pytest.mark.parametrize(
    "label",
    [
        "nvidia_driver",
        "site_mirror_and_proxy_configuration_for_air_gapped_hosts",
        "gpu-node-a01.example.internal GPU 7 gemm_bf16",
        "averyveryveryverylongwordwithoutanyplacetobreakitatall",
    ],
)
def test_wrapped_lines_fit_and_keep_every_character(label: str) -> None:
    width = 120.0
    lines = wrap_label(label, 11, width)
    assert all(text_width(line, 11) <= width for line in lines), lines
    assert "".join(lines).replace(" ", "") == label.replace(" ", "")
    if text_width(label, 11) <= width:
        assert lines == [label]


def test_a_label_breaks_after_its_separators_first() -> None:
    assert wrap_label("container_toolkit_runtime_setup", 11, 130) == ["container_toolkit_", "runtime_setup"]
    assert wrap_label("gpu-node-a01 GPU 0", 11, 90) == ["gpu-node-a01", "GPU 0"]  # the space goes


DEJAVU = Path("/usr/share/fonts/truetype/dejavu")


@pytest.mark.parametrize(("font", "bold"), [("DejaVuSans.ttf", False), ("DejaVuSans-Bold.ttf", True)])
def test_the_width_estimate_is_never_narrower_than_dejavu_sans(font: str, bold: bool) -> None:
    """The charts name DejaVu Sans first; every printable ASCII glyph must fit its estimate."""
    ttlib = pytest.importorskip("fontTools.ttLib", reason="fontTools comes with matplotlib (the dev extra)")
    if not (DEJAVU / font).exists():
        missing(f"{font} is not installed (Debian's fonts-dejavu-core)")
    face = ttlib.TTFont(str(DEJAVU / font))
    cmap, hmtx, em = face.getBestCmap(), face["hmtx"], face["head"].unitsPerEm
    for code in range(32, 127):
        actual = hmtx[cmap[code]][0] / em * 100
        assert text_width(chr(code), 100, bold=bold) >= actual, (chr(code), actual)
