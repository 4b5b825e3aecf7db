"""report.html in a real browser: headless Chromium renders it to a PNG that is not blank.

The page is rendered from a report.json document shaped like a real run's (two hosts, one with
a verify report carrying GEMM, bandwidth, a loss curve and GPU utilization samples).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from provision.fleet.report import write_html

DOC = {
    "ok": False,
    "run": "20261130-030000-beef",
    "check": False,
    "details": [
        {
            "host": "gpu1",
            "group": "h100_sxm_x8_ubuntu_22_04",
            "verdict": "pass",
            "changed": 31,
            "failed_task": None,
            "reboots": 1,
            "duration_s": 412.0,
            "role_seconds": {
                "preflight": 6.0,
                "nvidia_driver": 210.0,
                "python_env": 12.0,
                "frameworks": 140.0,
                "verify": 3.0,
            },
            "verify": {
                "checks": [
                    {"name": "gemm_bf16", "value": 742.0, "threshold": 592.0},
                    {"name": "hbm_bandwidth", "value": 2900.0, "threshold": 2500.0},
                ],
                "training": {
                    "loss_curve": [2.31, 1.9, 1.4, 1.0, 0.7, 0.5, 0.42],
                    "gpu_util_series": [40, 95, 97, 98, 97, 99],
                },
            },
        },
        {
            "host": "gpu2",
            "group": "h100_sxm_x8_ubuntu_22_04",
            "verdict": "fail",
            "changed": 4,
            "failed_task": "Install the pinned wheels",
            "reboots": 0,
            "duration_s": 80.0,
            "message": "Read-only file system: '/opt/provision/venv'",
            "role_seconds": {"preflight": 7.0},
            "verify": None,
        },
    ],
}


def _png_pixels(path: Path) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct RGB(A) pixels of an 8-bit non-interlaced PNG (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 3
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    colours: set[bytes] = set()
    prev = bytearray(stride)
    for y in range(height):
        row = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        kind, line = row[0], bytearray(row[1:])
        for i in range(stride):  # undo the PNG row filters
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 4 == 0:  # every 4th row is plenty to count colours
            colours.update(bytes(line[i : i + 3]) for i in range(0, stride, channels * 4))
        prev = line
    return width, height, colours


def test_chromium_renders_report_html_to_a_non_trivial_png(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (tests/hosts/install-deps.sh installs it)")
    page = write_html(DOC, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=1400,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    width, height, colours = _png_pixels(shot)
    assert (width, height) == (1400, 1600)
    # a blank or error page has a handful of colours; text, bars, lines and anti-aliasing give many
    assert len(colours) > 50, len(colours)
    # the chart palette's pass green and fail red are both on the page (a pass bar and a failed verdict)
    assert any(c[1] > 100 and c[0] < 60 for c in colours) and any(c[0] > 150 and c[1] < 60 for c in colours)
