"""The probe script (provision/remote/snippets/probe.sh): a real file, shipped with the package,
its parameters passed as environment variables, run here as gather runs it on a host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provision.fleet.health_spec import installed_change, program_digests
from provision.hosts import gather
from provision.hosts.facts import InstalledHealth
from provision.hosts.local import LocalTransport
from provision.remote.health import SOURCES
from tests import prereq

PACKAGE = Path(gather.__file__).resolve().parents[1]


def _run(options: gather.GatherOptions, parts: list[str]) -> dict[str, str]:
    result = LocalTransport().run(gather.probe_command(options, parts), timeout=120)
    assert result.ok, result.stderr
    return gather.split_sections(result.stdout)


def test_the_script_is_a_file_inside_the_package() -> None:
    """pyproject's wheel carries the whole provision package, so the file travels with it."""
    assert gather.PROBE_SCRIPT.is_file() and gather.PROBE_SCRIPT.is_relative_to(PACKAGE)
    text = gather.PROBE_SCRIPT.read_text()
    assert "@@DPKG_FORMAT@@" not in text and "@@VENV@@" not in text  # no text is filled in


def test_shellcheck_finds_nothing() -> None:
    if shutil.which("shellcheck") is None:
        prereq.missing("shellcheck is not installed")
    r = subprocess.run(["shellcheck", "-s", "sh", str(gather.PROBE_SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_the_main_part_prints_the_sections_and_reads_its_parameters() -> None:
    venv = str(Path(sys.executable).parent.parent)  # this venv: the venv snippet reads it
    options = gather.GatherOptions(venv=venv, imds_disabled=True)
    sections = _run(options, ["main"])
    assert {"id", "os_release", "uname", "dpkg", "units", "runtimes", "imds", "venv"} <= set(sections)
    assert "locks" not in sections  # the root part was not asked for
    assert sections["imds"] == ""  # disabled: not asked
    facts = gather.facts_from_sections(sections, options)
    assert facts.venv is not None and facts.venv.error is None and facts.venv.python
    assert facts.kernel and facts.arch


def test_the_root_part_runs_the_lock_snippet_on_the_lock_files_it_is_given() -> None:
    sections = _run(gather.GatherOptions(), ["root"])
    assert set(sections) == {"locks"}
    doc = json.loads(sections["locks"])
    assert set(doc) == {"held", "denied"}


def test_an_unknown_part_is_refused() -> None:
    result = LocalTransport().run(gather.probe_command(gather.GatherOptions(), ["mian"]), timeout=60)
    assert result.exit_status == 2 and "unknown part mian" in result.stderr


def test_the_main_part_reads_the_installed_health_program_and_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real script and the real ``sha256sum`` over the program's real files, laid out as the
    health role installs them (in a temporary folder: the probe is pointed there), and a spec
    written as the role writes it (JSON, keys sorted)."""
    program, spec_file = tmp_path / "lib" / "health", tmp_path / "etc" / "health.json"
    monkeypatch.setattr(gather, "HEALTH_PROGRAM_DIR", str(program))
    monkeypatch.setattr(gather, "HEALTH_SPEC_FILE", str(spec_file))
    options = gather.GatherOptions(imds_disabled=True)
    spec = {"schema": "provision.health/1", "lock_hash": "0123456789abcdef", "gpus": {"count": 0}, "venv": None}

    nothing = gather.facts_from_sections(_run(options, ["main"]), options).health
    assert nothing == InstalledHealth(None, {})
    assert installed_change(nothing, spec, {}) == "provision-health is not installed"

    program.mkdir(parents=True)
    for name, source in SOURCES.items():
        (program / name).write_bytes(source.read_bytes())
    spec_file.parent.mkdir()
    spec_file.write_text(json.dumps(spec, indent=4, sort_keys=True) + "\n")
    found = gather.facts_from_sections(_run(options, ["main"]), options).health
    assert found is not None and found.files == program_digests() and found.spec == spec
    assert installed_change(found, spec, {}) is None

    (program / "check.py").write_text("# an older program\n")
    older = gather.facts_from_sections(_run(options, ["main"]), options).health
    assert installed_change(older, spec, {}) == "provision-health is another version"
