"""report.html's host sections, from a run's report.json (tests/support/report_docs.py builds it with
the resolver, the smoke job's own verdict and `up`'s records): the stack locked beside what the
host has, every check with value, unit, pass line and result, and the verdict with its reason."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from typing import Any

import pytest

from provision.errors import BadInput
from provision.fleet.records import ran_on_cpu
from provision.fleet.report import checks_table, pass_line, reasons, render_html, stack_rows
from provision.model.report import Check, HostDetail, UpReport
from provision.stack.drift import expected_versions
from tests.support import report_docs

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return report_docs.fleet_doc(tmp_path_factory.mktemp("run"))


def _detail(doc: dict[str, Any], host: str) -> dict[str, Any]:
    return next(d for d in doc["details"] if d["host"] == host)


def _record(doc: dict[str, Any], host: str) -> HostDetail:
    """The host as the page reads it: its record, from report.json's one reader."""
    return HostDetail.from_json(_detail(doc, host))


def _page(doc: dict[str, Any]) -> str:
    return render_html(UpReport.from_json(doc))


def _rows(html: str) -> list[list[str]]:
    """A table's rows as cell texts (tags stripped, entities read)."""
    return [
        [unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html)
    ]


def test_report_json_keeps_the_locked_versions_and_the_probe_facts(doc: dict[str, Any]) -> None:
    gpu = report_docs.gpu_group(["x"])
    d = _detail(doc, "gpu-node-a01")
    assert d["locked"] == expected_versions(gpu)  # the lock group as `up` read it
    assert d["probed"]["driver"] == "550.163.01"  # what the host had before the run


def test_the_stack_shows_locked_found_and_before_side_by_side(doc: dict[str, Any]) -> None:
    locked = expected_versions(report_docs.gpu_group(["x"]))
    rows = {r.item: r for r in stack_rows(_record(doc, "gpu-node-a01"))}
    driver = rows["NVIDIA driver"]
    assert (driver.locked, driver.found, driver.before, driver.differs) == (
        locked["driver"],
        locked["driver"],
        "550.163.01",
        False,
    )
    assert rows["torch"].locked == f"{locked['torch']} ({locked['torch_variant']})"
    assert rows["torch"].found == f"{locked['torch']}+{locked['torch_variant']}" and not rows["torch"].differs
    assert rows["cuDNN"].locked == rows["cuDNN"].found == "9.10.2"  # torch's 91002, read dotted on both sides
    assert rows["Python"].found.startswith(str(locked["python"]) + ".") and not rows["Python"].differs
    assert rows["NCCL"].locked is None and rows["NCCL"].found == "2.27.3"  # found, not locked
    assert rows["CUDA the driver supports"].found == "13.0"
    assert "TensorFlow" not in rows and "JAX" not in rows  # nobody has them, nobody wants them


def test_a_version_that_left_the_lock_is_marked(doc: dict[str, Any]) -> None:
    rows = {r.item: r for r in stack_rows(_record(doc, "gpu-node-a02"))}
    assert rows["torch"].found == "2.7.1+cu126" and rows["torch"].differs
    assert rows["CUDA runtime in torch"].found == "12.6" and rows["CUDA runtime in torch"].differs
    assert not rows["NVIDIA driver"].differs and not rows["cuDNN"].differs
    page = _page(doc)
    section = page[page.index('id="host-gpu-node-a02"') : page.index('id="host-gpu-node-a03"')]
    assert '<span class="differs">2.7.1+cu126 ≠ locked</span>' in section


def test_a_host_that_never_ran_the_job_shows_the_lock_and_the_probe_only(doc: dict[str, Any]) -> None:
    d = _record(doc, "gpu-node-a03")
    rows = {r.item: r for r in stack_rows(d)}
    assert rows["NVIDIA driver"].found is None and rows["NVIDIA driver"].before == "550.163.01"
    page = _page(doc)
    section = page[page.index('id="host-gpu-node-a03"') : page.index('id="host-cpu-builder-1"')]
    assert "not verified" in section and "No checks: the smoke job did not run on this host." in section
    assert reasons(d) == [
        "the task 'frameworks : Install the locked wheels' failed: "
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE (torch)"
    ]


def test_the_checks_table_has_value_unit_pass_line_and_result(doc: dict[str, Any]) -> None:
    checks = _detail(doc, "gpu-node-a02")["verify"]["checks"]
    rows = _rows(checks_table([Check.from_json(c) for c in checks]))
    assert rows[0] == ["check", "what it proves", "GPU", "value", "unit", "pass line", "result", "why it failed"]
    by_key = {(r[0], r[2]): r for r in rows[1:]}
    slow = by_key[("gemm_bf16", "1")]
    assert slow[3:7] == ["402.3", "TFLOP/s", "≥ 593.4", "FAIL"]
    assert "below the pass line 593.4" in slow[7]
    assert by_key[("gemm_bf16", "0")][3:7] == ["742.5", "TFLOP/s", "≥ 593.4", "pass"]
    assert by_key[("temperature", "0")][3:7] == ["44", "C", "< 87", "pass"]
    assert by_key[("ecc", "0")][3:6] == ["0", "errors", "= 0"]
    assert by_key[("version_torch", "")][3:7] == ["2.7.1+cu126", "", "2.8.0 (locked)", "FAIL"]
    assert by_key[("version_cudnn", "")][3:6] == ["9.10.2", "", "9.10.2 (locked)"]
    assert by_key[("training_loss", "")][3:7] == ["0.061", "loss", "≤ 0.5", "pass"]
    assert by_key[("training_util", "")][4:6] == ["%", "≥ 70"]
    assert len(rows) - 1 == len(checks)  # every check has its row
    assert sum(r[6] == "FAIL" for r in rows[1:]) == 3


def test_a_pass_line_without_a_relation_is_shown_as_it_is() -> None:
    """A report of an older job (no pass_if) still shows its threshold."""
    assert pass_line(Check.from_json({"name": "gemm_bf16", "threshold": 592.0})) == "592"
    assert pass_line(Check.from_json({"name": "kernel", "threshold": None})) == ""


def test_the_reason_of_a_failing_host_is_its_failed_checks_root_cause_first(doc: dict[str, Any]) -> None:
    why = reasons(_record(doc, "gpu-node-a02"))
    assert why[0] == "drift: torch is 2.7.1+cu126 on this host, expected 2.8.0"
    assert any("gemm_bf16 402.3 TFLOP/s is below the pass line 593.4" in line for line in why)
    assert reasons(_record(doc, "gpu-node-a01")) == ["every check passed"]


def test_a_rolled_back_host_says_so_first(doc: dict[str, Any]) -> None:
    detail = {**_detail(doc, "gpu-node-a01"), "lock_hash": "aaaa", "rolled_back_from": "bbbb"}
    assert reasons(HostDetail.from_json(detail)) == ["rolled back from bbbb to aaaa", "every check passed"]
    assert "rolled back from bbbb to aaaa" in render_html(
        UpReport.from_json({**doc, "details": [detail if d["host"] == "gpu-node-a01" else d for d in doc["details"]]})
    )


def test_the_page_has_a_summary_a_section_per_host_and_the_charts(doc: dict[str, Any]) -> None:
    page = _page(doc)
    assert "2 of 4 hosts passed" in page
    summary = _rows(page[page.index("<h2>Verdict per host</h2>") : page.index("</table>")])
    assert [r[:3] for r in summary[1:]] == [
        ["gpu-node-a01", "h100_sxm_x2_ubuntu_22_04", "pass"],
        ["gpu-node-a02", "h100_sxm_x2_ubuntu_22_04", "fail"],
        ["gpu-node-a03", "h100_sxm_x2_ubuntu_22_04", "fail"],
        ["cpu-builder-1", "cpu_debian_12", "pass"],
    ]
    assert summary[2][3].startswith("drift: torch is 2.7.1+cu126") and "(and 2 more below)" in summary[2][3]
    for d in doc["details"]:
        assert f'<section id="host-{d["host"]}">' in page
    # a passing host's checks are folded, a failing host's open
    assert "<details><summary><h3>Checks: 35, all passed</h3>" in page
    assert "<details open><summary><h3>Checks: 35, 3 failed</h3>" in page
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    titles = [ET.fromstring(s).get("aria-label") for s in svgs]
    assert titles == [
        "Matrix multiply (GEMM) per GPU against its pass line",
        "GPU memory copy (device to device) against its pass line",
        "Host-GPU copies over PCIe against their pass line",
        "Training loss of the smoke job",
        "GPU utilization while training",
        "Time per role (slowest host)",
    ]
    loss = ET.fromstring(svgs[3])
    numbers = {t.text for t in loss.iter(f"{SVG}text")}
    assert {"0", "50", "100", "150", "200", "training step", "loss", "pass bound (0.5)"} <= numbers


def test_an_old_report_without_lock_probe_steps_or_period_still_renders(doc: dict[str, Any]) -> None:
    """report.json from before these fields: the page says what it knows and claims no more."""
    old = json.loads(json.dumps(doc))
    for d in old["details"]:
        del d["locked"], d["probed"]
        for key in ("loss_curve_steps", "gpu_util_period_s"):
            ((d.get("verify") or {}).get("training") or {}).pop(key, None)
    page = _page(old)
    assert page.count("<section") == 4 and "2.7.1+cu126" in page
    texts = {t.text for s in re.findall(r"<svg.*?</svg>", page, re.S) for t in ET.fromstring(s).iter(f"{SVG}text")}
    assert {"point of the recorded curve", "NVML sample"} <= texts
    assert not {"training step", "seconds into the timed steps"} & texts


def test_the_page_reads_report_json_once_through_its_record(doc: dict[str, Any]) -> None:
    """The record keeps what report.json says (types as written), and a wrong field is one line."""
    report = UpReport.from_json(json.loads(json.dumps(doc)))  # as the file has it
    assert [d.host for d in report.details] == [d["host"] for d in doc["details"]]
    a02 = report.details[1]
    assert a02.verify is not None and a02.verify.versions["torch"] == "2.7.1+cu126"
    assert a02.probed is not None and a02.probed.driver == _detail(doc, "gpu-node-a02")["probed"]["driver"]
    assert a02.locked == _detail(doc, "gpu-node-a02")["locked"]
    assert report.details[2].verify is None  # the job never ran there
    bad = json.loads(json.dumps(doc))
    bad["details"][0]["verify"]["checks"][0]["gpu"] = [0]
    with pytest.raises(
        BadInput, match=r"report.json.details\[0\].verify.checks\[0\].gpu is not a GPU index or null"
    ) as e:
        UpReport.from_json(bad)
    assert "provision up" in e.value.hint  # report.json's writer, not the lock's `provision plan`


@pytest.mark.parametrize(
    ("verdict", "failed_task", "said"),
    [
        ("pass", None, True),  # the job ran on the CPU and passed
        ("fail", "verify", True),  # it ran and failed
        ("not-verified", None, False),  # nothing importable: the job never ran
        ("fail", "(host lock)", False),  # another run held the host
        ("fail", "(probe)", False),
        ("not-run", None, False),
    ],
)
def test_a_check_run_says_the_job_ran_on_the_cpu_only_where_it_ran(
    verdict: str, failed_task: str | None, said: bool
) -> None:
    assert ran_on_cpu(True, verdict, failed_task) is said
    assert ran_on_cpu(False, verdict, failed_task) is False
