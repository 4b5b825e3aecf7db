"""provision.yaml: every key optional, unknown keys refused with the nearest key, typed values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.config import Config, load_config, parse_config
from provision.errors import BadInput
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve

FULL = """
stack:
  frameworks: ["torch==2.8.0"]
  driver: auto
  kernel_modules: auto
  cuda_toolkit: none
  cudnn: none
  python: auto
  torch_index: auto
install:
  method: auto
  venv: /opt/provision/venv
  pip: {index_url: null, extra_index_urls: [], find_links: [], trusted_hosts: []}
  apt: {mirror: null, proxy: null}
  reboot: auto
verify:
  allow_cpu: false
"""


def test_the_design_example_parses_to_typed_values(tmp_path: Path) -> None:
    p = tmp_path / "provision.yaml"
    p.write_text(FULL)
    cfg = load_config(p)
    assert cfg.stack.frameworks == ("torch==2.8.0",)
    assert cfg.install.venv == "/opt/provision/venv"
    assert cfg.install.pip.extra_index_urls == ()
    assert cfg.verify.allow_cpu is False
    assert cfg.request_args()["install_method"] == "auto"


@pytest.mark.parametrize("text", ["", "{}", "stack: {}", "install:\n  pip: {}\n", "verify: {}"])
def test_every_key_is_optional(text: str) -> None:
    import yaml

    cfg = parse_config(yaml.safe_load(text))
    assert cfg.stack == Config().stack and cfg.install == Config().install


@pytest.mark.parametrize(
    ("text", "key", "nearest"),
    [
        ("stak: {}", "stak", "stack"),
        ("stack: {framework: [torch]}", "stack.framework", "stack.frameworks"),
        ("stack: {cuda: '12.8'}", "stack.cuda", None),
        ("install: {venvs: /x}", "install.venvs", "install.venv"),
        ("install: {pip: {index: x}}", "install.pip.index", "install.pip.index_url"),
        ("install: {apt: {mirrors: x}}", "install.apt.mirrors", "install.apt.mirror"),
        ("verify: {allowcpu: true}", "verify.allowcpu", "verify.allow_cpu"),
    ],
)
def test_unknown_keys_are_bad_input_with_the_nearest_key(text: str, key: str, nearest: str | None) -> None:
    import yaml

    with pytest.raises(BadInput) as err:
        parse_config(yaml.safe_load(text))
    assert f"`{key}`" in err.value.message
    if nearest:
        assert nearest in err.value.suggestions
        assert nearest in err.value.hint
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("stack: {python: 3.10}", "YAML drops a version's trailing zeros"),
        ("stack: {kernel_modules: closed}", "must be one of"),
        ("stack: {torch_index: conda}", "must be one of"),
        ("stack: {frameworks: 3}", "list of specs"),
        ("install: {method: apt}", "must be one of"),
        ("install: {reboot: always}", "must be one of"),
        ("install: {pip: {extra_index_urls: 5}}", "list of strings"),
        ("verify: {allow_cpu: 'yes please'}", "true or false"),
        ("stack: [1, 2]", "must be a mapping"),
        ("- a\n- b", "must be a mapping"),
        ("stack: {driver: true}", "auto, none"),
    ],
)
def test_wrong_values_are_bad_input(text: str, needle: str) -> None:
    import yaml

    with pytest.raises(BadInput, match=needle):
        parse_config(yaml.safe_load(text))


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("stack: [unclosed\n")
    with pytest.raises(BadInput, match="not valid YAML at line"):
        load_config(bad)


def test_numbers_from_yaml_become_version_strings() -> None:
    import yaml

    cfg = parse_config(yaml.safe_load("stack: {driver: 580, cuda_toolkit: '12.8', python: '3.11'}"))
    assert (cfg.stack.driver, cfg.stack.cuda_toolkit, cfg.stack.python) == ("580", "12.8", "3.11")


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ("stack: {cudnn: 9.10}", "stack.cudnn", 'cudnn: "9.10.2.21"'),
        ("stack: {cuda_toolkit: 12.10}", "stack.cuda_toolkit", 'cuda_toolkit: "12.8"'),
        # a float that reads back the same is refused too: the rule cannot tell it from 12.10
        ("stack: {cuda_toolkit: 12.8}", "stack.cuda_toolkit", 'cuda_toolkit: "12.8"'),
        ("stack: {driver: 580.10}", "stack.driver", 'driver: "580.95.05"'),
        ("stack: {python: 3.10}", "stack.python", 'python: "3.10"'),
    ],
)
def test_versions_yaml_read_as_numbers_are_refused_with_quote_it(text: str, key: str, hint: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_config(yaml.safe_load(text))
    assert f"`{key}` is a number" in err.value.message
    assert err.value.hint == f"quote it, e.g. {hint}"


@pytest.mark.parametrize("driver", ["580.1", "580.95.5", "58.95.05", "580.1234.01", "latest"])
def test_a_driver_version_of_no_form_nvidia_uses_is_refused(driver: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_config(yaml.safe_load(f"stack: {{driver: '{driver}'}}"))
    assert "`stack.driver` is not a driver branch or version" in err.value.message
    assert "NNN.NN, NNN.NNN, NNN.NN.NN or NNN.NNN.NN" in err.value.hint


@pytest.mark.parametrize("driver", ["auto", "none", "580", "570.26", "580.142", "580.95.05", "580.159.03"])
def test_every_driver_form_nvidia_uses_is_taken(driver: str) -> None:
    assert parse_config(yaml.safe_load(f"stack: {{driver: '{driver}'}}")).stack.driver == driver


def test_a_config_that_is_not_utf8_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "provision.yaml"
    p.write_bytes("stack: {python: '3.11'}  # caf\u00e9\n".encode("latin-1"))
    with pytest.raises(BadInput) as err:
        load_config(p)
    assert err.value.message.startswith(f"{p} is not UTF-8 text") and err.value.hint == "save the config as UTF-8"


def test_cpu_only_config_resolves_to_a_cpu_stack_without_driver() -> None:
    """The config end-to-end tests use on GPU-less hosts."""
    import yaml

    cfg = parse_config(yaml.safe_load('stack: {frameworks: ["torch==2.13.0+cpu"], driver: none}'))
    res = resolve(StackRequest.build(**cfg.request_args()), HostSpec.describe(os="debian-12"))
    assert res.stack.driver is None
    torch = res.stack.frameworks["torch"]
    assert (torch.variant, torch.index_url) == ("cpu", "https://download.pytorch.org/whl/cpu")
    assert res.packages.to_json()["pip"]["requirements"] == ["torch==2.13.0+cpu"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("install: {python_source: conda}", "install.python_source` must be one of auto, os, standalone"),
        ("install: {python_mirror: ftp://mirror/pbs}", "install.python_mirror` must be an http(s):// or file:// URL"),
        ("install: {python_downloads_json: downloads.json}", "install.python_downloads_json` must be an http"),
    ],
)
def test_python_source_settings_refuse_bad_values(text: str, needle: str) -> None:
    with pytest.raises(BadInput) as err:
        parse_config(yaml.safe_load(text))
    assert needle in err.value.message


def test_python_source_reaches_the_request_and_the_mirror_the_install_settings() -> None:

    cfg = parse_config(
        {"install": {"python_source": "standalone", "python_mirror": "file:///srv/pbs", "python_downloads_json": None}}
    )
    assert cfg.request_args()["python_source"] == "standalone"
    assert StackRequest.build(**cfg.request_args()).python_source == "standalone"
    settings = cfg.install  # the install settings record itself, built once here
    assert (settings.python_mirror, settings.python_downloads_json) == ("file:///srv/pbs", None)
    assert parse_config(None).request_args()["python_source"] == "auto"
