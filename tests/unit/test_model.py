"""The typed model (provision/model/): the lock reads back to the same bytes, bad input names its
key, the model imports nothing of provision but errors, and the component list is the smoke job's."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from provision.errors import BadInput
from provision.model import COMPONENTS, Lock, dumps_lock, parse_lock
from provision.model.components import JOB_CHECKS, JOB_REPORTS
from provision.remote.smoke import environment, frameworks
from tests.cli_run import provision

ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((ROOT / "tests").rglob("*.lock"))
ASSUMED = [
    "os=ubuntu-22.04,gpu=H100-SXM:8,name=hgx",
    "os=debian-12,python=3.11,name=cpu",
    "os=rocky-9,gpu=L4:1,name=l4",
    "os=ubuntu-24.04,gpu=L4:1,arch=aarch64,name=arm",
    "os=amzn-2023,gpu=T4:1,name=t4",
]


def test_there_are_golden_locks() -> None:
    assert len(LOCKS) >= 7


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_every_lock_under_tests_reads_back_byte_for_byte(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lock = parse_lock(text, str(path))
    assert dumps_lock(lock) == text
    assert Lock.from_json(json.loads(text)).to_json() == json.loads(text)


@pytest.mark.parametrize("assume", ASSUMED)
def test_what_plan_writes_reads_back_byte_for_byte(assume: str, tmp_path: Path) -> None:
    args = ["--driver", "none"] if "python=" in assume else []
    r = provision("plan", "--assume", assume, *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "provision.lock").read_text(encoding="utf-8")
    assert dumps_lock(parse_lock(text)) == text


def _golden() -> dict:
    return json.loads((ROOT / "tests/unit/golden/render/ubuntu-24.04.lock").read_text())


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("host", "gpu_count"), "eight", "host.gpu_count"),
        (("host", "os"), 7, "host.os"),
        (("stack", "driver", "version"), 580, "stack.driver.version"),
        (("stack", "cudnn"), "9", "stack.cudnn"),
        (("stack", "python_source"), "conda", "stack.python_source"),
        (("stack", "frameworks", "torch", "cuda"), ["12.8"], "stack.frameworks.torch.cuda"),
        (("stack", "frameworks", "jax", "extras"), "cuda", "stack.frameworks.jax.extras"),
        (("warnings",), "none", "warnings"),
    ],
)
def test_bad_input_names_the_key(path: tuple[str, ...], value: object, named: str) -> None:
    doc = _golden()
    node = doc["groups"][0]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(BadInput) as err:
        parse_lock(json.dumps(doc))
    assert named in err.value.message and err.value.exit_code == 2


def test_the_model_imports_nothing_of_provision_but_errors() -> None:
    for path in (ROOT / "provision" / "model").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                if name.startswith("provision"):
                    assert name == "provision.errors" or name.startswith("provision.model"), (path, name)
                else:
                    assert name.split(".")[0] in (
                        "__future__",
                        "collections",
                        "dataclasses",
                        "json",
                        "re",
                        "typing",
                        "urllib",
                    )


def test_the_smoke_job_reports_the_models_components() -> None:
    """The job (standard library only on the hosts) keeps its own keys: they are the model's."""
    assert {*environment.VERSION_KEYS, *frameworks.CHECKS} == set(JOB_REPORTS)
    cpu = SimpleNamespace(
        __version__="2.13.0+cpu",
        version=SimpleNamespace(cuda=None),
        backends=SimpleNamespace(cudnn=SimpleNamespace(is_available=lambda: False)),
    )
    assert set(environment.versions(cpu, None, on_gpu=False)) == set(environment.VERSION_KEYS)
    assert set(JOB_CHECKS) <= {c.key for c in COMPONENTS if c.locked}
    assert len({c.key for c in COMPONENTS}) == len(COMPONENTS)


def test_one_import_of_the_model_loads_no_other_provision_module() -> None:
    code = "import sys, provision.model; print(sorted(m for m in sys.modules if m.startswith('provision')))"
    out = subprocess.run([str(Path(__import__("sys").executable)), "-c", code], capture_output=True, text=True)
    loaded = json.loads(out.stdout.replace("'", '"'))
    assert all(m in ("provision", "provision.errors") or m.startswith("provision.model") for m in loaded), loaded
