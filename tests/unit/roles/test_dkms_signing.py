"""nvidia_driver's Secure Boot branch: how the host's dkms signs, from `dkms --version`.

The filter (playbooks/roles/nvidia_driver/filter_plugins/dkms_signing.py) decides whether mok.yml
writes /etc/dkms/framework.conf.d (dkms >= 3.0.4) or puts the pair at /var/lib/shim-signed/mok
(older: Ubuntu 22.04's 2.8.7). The DKMS build signed for real is in tests/integration/test_roles_images.py.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from provision.resources import playbooks_dir

PLUGIN = playbooks_dir() / "roles" / "nvidia_driver" / "filter_plugins" / "dkms_signing.py"


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dkms_signing", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("output", "version", "scheme"),
    [
        ("dkms-2.8.7", "2.8.7", "shim-signed"),  # Ubuntu 22.04
        ("dkms-3.0.3", "3.0.3", "shim-signed"),  # the last release with the fixed shim-signed pair
        ("dkms-3.0.4", "3.0.4", "framework-conf"),  # mok_signing_key and framework.conf.d from here
        ("dkms-3.0.10", "3.0.10", "framework-conf"),  # Debian 12
        ("dkms-3.0.11", "3.0.11", "framework-conf"),  # Ubuntu 24.04
        ("dkms-3.1", "3.1", "framework-conf"),
        ("", None, "framework-conf"),  # no dkms yet (--check before it is installed)
    ],
)
def test_the_dkms_version_picks_how_modules_are_signed(output: str, version: str | None, scheme: str) -> None:
    assert _plugin().dkms_signing(output) == {"version": version, "scheme": scheme}


def test_the_filter_is_registered_under_the_roles_prefix() -> None:
    filters = _plugin().FilterModule().filters()
    assert filters["nvidia_driver_dkms_signing"]("dkms-2.8.7")["scheme"] == "shim-signed"
