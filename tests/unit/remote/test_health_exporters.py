"""provision-health's outputs: the node_exporter textfile and the Node Feature Discovery features.d
file, written by the real program (``python -m provision.remote.health``) against the same
STAND-IN host as test_health_check.py (tests/support/health_host.py, named there), and read back by real parsers: the
Prometheus project's own text-format parser (prometheus_client.parser) for the textfile, and
Kubernetes' label rules (apimachinery's IsQualifiedName / IsValidLabelValue, as regular
expressions) for the features. tests/integration/test_health_node_exporter.py scrapes a real
node_exporter."""

from __future__ import annotations

import ast
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provision.remote.health import check, exporters
from tests.support.health_host import cli

FIGURES = {"gpu": "NVIDIA H100 80GB HBM3", "figures": {"gemm_tflops": 712.5, "copy_gbps": 2650.0}}
# apimachinery pkg/util/validation/validation.go: a label key is [prefix/]name, the prefix a DNS
# subdomain (at most 253), the name a qualified name (at most 63); a value empty or a qualified name.
QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in families(text)[name].samples}


def textfile(host: dict[str, Any], *extra: str) -> tuple[Any, str]:
    out = host["tmp"] / "textfile"
    out.mkdir(exist_ok=True)
    proc = cli(host, "--textfile", str(out), *extra)
    return proc, (out / exporters.TEXTFILE).read_text()


def test_a_healthy_host_textfile(host: dict[str, Any]) -> None:
    host["spec"]["group"] = "h100-x2-debian-12"
    host["spec"]["verify"].update(FIGURES)
    proc, text = textfile(host)
    assert proc.returncode == 0 and proc.stdout == "healthy\n", proc.stderr
    parsed = families(text)
    assert {m.name for m in exporters.METRICS} == set(parsed)  # every family, each with HELP and TYPE
    assert all(parsed[m.name].type == m.kind == "gauge" for m in exporters.METRICS)
    assert text.count("# TYPE ") == text.count("# HELP ") == len(exporters.METRICS)
    assert samples(text, "provision_health_ok") == {(): 1.0}
    assert samples(text, "provision_health_exit_code") == {(): 0.0}
    drift = samples(text, "provision_drift")
    versions = {p["name"]: p["version"] for p in host["spec"]["python_packages"]}
    for name, version in versions.items():  # every locked item, each 0 (as locked)
        assert drift[(("component", name), ("found", version), ("locked", version))] == 0.0
    assert (
        drift[(("component", "driver"), ("found", "595.58.03"), ("locked", "595.58.03"))] == 0.0
    )  # epoch, revision dropped
    assert drift[(("component", "python"), ("found", "3.11.2"), ("locked", "3.11"))] == 0.0
    assert set(drift.values()) == {0.0}
    assert samples(text, "provision_verify_pass") == {(): 1.0}
    assert samples(text, "provision_verify_age_seconds")[()] > 0
    gpu = (("gpu", "NVIDIA H100 80GB HBM3"),)
    assert samples(text, "provision_verify_gemm_tflops") == {gpu: 712.5}
    assert samples(text, "provision_verify_copy_gbps") == {gpu: 2650.0}
    assert samples(text, "provision_lock_info") == {
        (("group", "h100-x2-debian-12"), ("lock_hash", "0123456789abcdef")): 1
    }
    # node_exporter runs as its own user: the file is readable by it; no temporary file is left
    folder = host["tmp"] / "textfile"
    assert os.stat(folder / exporters.TEXTFILE).st_mode & 0o777 == 0o644
    assert [p.name for p in folder.iterdir()] == [exporters.TEXTFILE]


def test_drift_is_a_series_with_the_locked_and_found_versions(host: dict[str, Any]) -> None:
    host["spec"]["python_packages"].append({"name": "torch", "version": "2.13.0", "sha256": "0" * 64})
    host["spec"]["verify"] = {"verdict": "fail", "at": "2026-12-01T10:00:00+00:00", "max_age_s": None}
    proc, text = textfile(host)
    assert proc.returncode == 1
    assert samples(text, "provision_drift")[(("component", "torch"), ("found", "none"), ("locked", "2.13.0"))] == 1.0
    assert samples(text, "provision_health_ok") == {(): 0.0}
    assert samples(text, "provision_health_exit_code") == {(): 1.0}
    assert samples(text, "provision_health_problems") == {(): 2.0}  # torch, and the failed verify
    assert samples(text, "provision_verify_pass") == {(): 0.0}
    assert "provision_verify_gemm_tflops" not in families(text)  # no figures in the spec: no series


def test_the_figures_come_from_the_verify_up_recorded(host: dict[str, Any]) -> None:
    """As `up` installs it: the spec has no verify; last-verify.json (of the spec's lock) has the
    verdict and the figures, and the textfile shows them. One of another lock shows none."""
    host["spec"]["verify"] = None
    at = datetime.now(timezone.utc).isoformat()
    recorded = {
        "schema": "provision.last-verify/1",
        "lock_hash": host["spec"]["lock_hash"],
        "verdict": "pass",
        "at": at,
    }
    path = host["roots"].last_verify
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**recorded, **FIGURES}))
    proc, text = textfile(host)
    assert proc.returncode == 0, proc.stderr
    assert samples(text, "provision_verify_pass") == {(): 1.0}
    assert samples(text, "provision_verify_gemm_tflops") == {(("gpu", "NVIDIA H100 80GB HBM3"),): 712.5}
    path.write_text(json.dumps({**recorded, **FIGURES, "lock_hash": "another"}))
    proc, text = textfile(host)
    assert samples(text, "provision_verify_pass") == {(): 0.0}
    assert "provision_verify_gemm_tflops{" not in text


def test_label_values_are_escaped_as_the_text_format_says() -> None:
    """Backslash, double quote and line feed, each read back as written by Prometheus's parser."""
    odd = 'a "quoted"\\path\nnext'
    assert exporters.escape_label(odd) == 'a \\"quoted\\"\\\\path\\nnext'
    # the verify in use is the one check_verify put in the facts (up's last-verify.json, else the spec's)
    out = check.Result(
        compared=[("weird", odd, "x\\y", False)], facts={"verify": {"verdict": "pass", **FIGURES, "gpu": odd}}
    )
    spec = {"lock_hash": "h", "group": odd}
    text = exporters.prometheus_text(spec, out)
    drift = samples(text, "provision_drift")
    assert drift == {(("component", "weird"), ("found", "x\\y"), ("locked", odd)): 1.0}
    assert samples(text, "provision_lock_info") == {(("group", odd), ("lock_hash", "h")): 1.0}
    assert samples(text, "provision_verify_gemm_tflops") == {(("gpu", odd),): 712.5}
    assert exporters.escape_help("a\\b\nc") == "a\\\\b\\nc"
    assert text.endswith("\n") and "\n\n" not in text


def test_one_sample_per_label_set() -> None:
    """A repeated comparison would repeat a series, which makes the whole file invalid."""
    out = check.Result(compared=[("driver", "1", "1", True), ("driver", "1", "1", True)])
    text = exporters.prometheus_text({"lock_hash": "h"}, out)
    assert text.count("provision_drift{") == 1


@pytest.mark.parametrize("option", ["--textfile", "--nfd-features"])
def test_a_directory_that_does_not_exist_is_one_line_and_nothing_written(host: dict[str, Any], option: str) -> None:
    missing = host["tmp"] / "no-such-dir"
    proc = cli(host, option, str(missing))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, proc.stderr
    assert lines[0] == f"error: {option} {missing} does not exist: create it, or name the directory the reader watches"
    assert not missing.exists() and not host["roots"].state.exists()  # before any change, the state too


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    (tmp_path / exporters.TEXTFILE).mkdir()  # the rename onto a directory fails
    with pytest.raises(exporters.ExportError, match="cannot write"):
        exporters.write_atomic(tmp_path, exporters.TEXTFILE, "provision_health_ok 1\n")
    assert [p.name for p in tmp_path.iterdir()] == [exporters.TEXTFILE]
    exporters.write_atomic(tmp_path, "x.prom", "a 1\n")
    exporters.write_atomic(tmp_path, "x.prom", "a 2\n")
    assert (tmp_path / "x.prom").read_text() == "a 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [exporters.TEXTFILE, "x.prom"]


def features(path: Path) -> tuple[datetime, dict[str, str]]:
    """Read a features.d file as NFD's local source does: comments, `# +expiry-time=`, key[=value]."""
    expiry, labels = None, {}
    for line in path.read_text().splitlines():
        if line.startswith("# +expiry-time="):
            expiry = datetime.strptime(line.split("=", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            labels[key] = value or "true"
    assert expiry is not None
    return expiry, labels


def test_nfd_features_of_a_healthy_and_an_unhealthy_host(host: dict[str, Any]) -> None:
    folder = host["tmp"] / "features.d"
    folder.mkdir()
    host["spec"]["expected"].update({"torch_cuda": "13.0", "cuda_toolkit": "13.0.2"})
    before = datetime.now(timezone.utc)
    proc = cli(host, "--nfd-features", str(folder))
    assert proc.returncode == 0, proc.stderr
    expiry, labels = features(folder / exporters.FEATURES)
    assert before + timedelta(seconds=exporters.NFD_EXPIRY_S - 5) <= expiry <= before + timedelta(minutes=11)
    p = exporters.NFD_PREFIX
    assert labels == {
        f"{p}verified": "true",
        f"{p}healthy": "true",
        f"{p}lock-hash": "0123456789abcdef",
        f"{p}driver": "595.58.03",
        f"{p}cuda-toolkit": "13.0.2",
        f"{p}torch-cuda": "13.0",
    }
    for key, value in labels.items():
        prefix, _, name = key.partition("/")
        assert DNS_SUBDOMAIN.match(prefix) and len(prefix) <= 253 and QUALIFIED.match(name) and len(name) <= 63
        assert QUALIFIED.match(value) and len(value) <= 63
    assert [p.name for p in folder.iterdir()] == [exporters.FEATURES]  # NFD ignores dot files; none left
    host["spec"]["python_packages"].append({"name": "torch", "version": "2.13.0", "sha256": "0" * 64})
    assert cli(host, "--nfd-features", str(folder)).returncode == 1
    _, labels = features(folder / exporters.FEATURES)
    assert (labels[f"{p}verified"], labels[f"{p}healthy"]) == ("false", "false")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2.13.0+cu130", "2.13.0-cu130"),
        ("-x y_", "x-y"),
        ("+++", ""),
        ("a" * 70 + ".b", "a" * 63),
        ("595.58.03", "595.58.03"),
    ],
)
def test_label_values_follow_the_kubernetes_rules(raw: str, value: str) -> None:
    assert exporters.label_value(raw) == value
    assert value == "" or (QUALIFIED.match(value) and len(value) <= 63)


def test_the_exporters_parse_as_python_3_8() -> None:
    """Hosts run the program with their own Python, 3.8 or newer."""
    ast.parse(Path(exporters.__file__).read_text(), feature_version=(3, 8))
    spec = json.dumps({"verify": None})  # a spec never verified: no verify series but the pass gauge
    text = exporters.prometheus_text({**json.loads(spec), "lock_hash": "h"}, check.Result())
    assert samples(text, "provision_verify_pass") == {(): 0.0} and "provision_verify_age_seconds" not in text
