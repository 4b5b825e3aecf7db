"""`provision matrix` is readable at 80 columns (issue 28: its GPU table broke headers and values
mid-word): in every view no line is wider than the terminal, headers are whole words, and the
values a user looks up (a GPU's name, a driver version) are never split."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

VIEWS = [[], ["--drivers"], ["--instances"], ["--gpu", "A10G", "--framework", "torch"], ["--framework", "tensorflow"]]
VIEWS += [["--framework", "jax"], ["--gpu", "H100-SXM"]]


@pytest.mark.parametrize("args", VIEWS, ids=lambda a: " ".join(a) or "gpus")
def test_every_view_fits_80_columns_without_splitting_words(args: list[str]) -> None:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "provision", "matrix", *args], capture_output=True, text=True, env=env, check=True
    )
    lines = r.stdout.splitlines()
    assert lines and max(len(line.rstrip()) for line in lines) <= 80
    text = "\n".join(lines)
    for word in ("compute_capability", "fabric_manager", "driver_branches", "gpu_memory_gib", "usd_per_hour"):
        assert word not in text  # short headers, not JSON keys broken over lines
    if not args:
        assert "RTX-PRO-6000-Blackwell-Server" in text and "\nRTX-5090 " in text  # whole names, one per row
        assert "(575.57.08)" in text  # an exact driver floor kept whole
    if args == ["--instances"]:
        assert "p4de.24xlarge" in text and "instance type" in text
