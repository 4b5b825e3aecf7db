"""report.html in a real browser: headless Chromium renders a fleet's report to a PNG.

The page is rendered from a report.json document as `up` writes it (tests/support/report_docs.py:
four hosts, one passing, one with a slow GPU and a torch that left the lock, one whose apply
failed, one CPU host), with roles of long names added, as a site's own roles would be. The PNG
stays in the test's tmp dir; with PROVISION_REPORT_SHOT=path it is also copied there, for a
person to look at (docs/how-to/report.md shows one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.fleet.report import write_html
from provision.model.report import UpReport
from tests.prereq import missing
from tests.support import report_docs

WIDTH, HEIGHT = 1280, 4400
LONG_ROLES = {
    "site_mirror_and_proxy_configuration_for_air_gapped_hosts": 31.0,
    "organisation.infrastructure.nvidia_container_runtime_configuration": 12.5,
    "local_monitoring_agent": 7.5,
}


def screenshot(browser: str, page: Path, shot: Path, profile: Path) -> None:
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
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def test_chromium_renders_a_fleet_report_that_fits_one_screenshot(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing("chromium is not installed")
    image = pytest.importorskip("PIL.Image", reason="Pillow comes with matplotlib (the test extra)")
    doc = report_docs.fleet_doc(tmp_path)
    cpu = next(d for d in doc["details"] if d["host"] == "cpu-builder-1")
    cpu["role_seconds"] = {**cpu["role_seconds"], **LONG_ROLES}
    page = write_html(UpReport.from_json(doc), tmp_path / "report.html")
    shot = tmp_path / "report.png"
    screenshot(browser, page, shot, tmp_path / "profile")
    if os.environ.get("PROVISION_REPORT_SHOT"):
        shutil.copy(shot, os.environ["PROVISION_REPORT_SHOT"])

    with image.open(shot) as png:
        rgb = png.convert("RGB")
    assert rgb.size == (WIDTH, HEIGHT)
    colours = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
    # a blank or error page has a handful of colours; text, bars, lines and anti-aliasing give many
    assert len(colours) > 50, len(colours)
    # the pass green and the fail red (bars and verdicts), and the amber of a version off the lock
    assert (4, 120, 87) in colours and (220, 38, 38) in colours and (254, 243, 199) in colours
    # the whole page is in the shot: it ends in white rows above the bottom
    ink_rows = [
        y for y in range(HEIGHT) if rgb.crop((0, y, WIDTH, y + 1)).getextrema() != ((255, 255), (255, 255), (255, 255))
    ]
    assert ink_rows and ink_rows[-1] < HEIGHT - 40, "the report is taller than the screenshot"
