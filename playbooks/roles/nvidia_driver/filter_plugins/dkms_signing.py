"""Ansible filter: how the host's dkms signs the modules it builds (Secure Boot), from `dkms --version`.

dkms >= 3.0.4 reads `mok_signing_key` / `mok_certificate` from /etc/dkms/framework.conf and
framework.conf.d/*.conf (dkms-project/dkms commits 3323033 "Rework signing #162" and 1c79926
"Add /etc/dkms/framework.conf.d directory (#116)", both first released in v3.0.4; Debian 12
ships 3.0.10, Ubuntu 24.04 3.0.11). Older dkms (Ubuntu 22.04's 2.8.7, 3.0.0 to 3.0.3) ignores
those settings: its sign_build signs with kmodsign and the fixed pair
/var/lib/shim-signed/mok/MOK.priv + MOK.der, and only where kmodsign, update-secureboot-policy
and that directory exist (dkms-project/dkms v2.8.7 and v3.0.3, `dkms`: sign_build).
"""

from __future__ import annotations

import re
from typing import Any

# The first release that reads the signing pair from framework.conf(.d).
FRAMEWORK_CONF_SINCE = (3, 0, 4)


def dkms_signing(version_output: str) -> dict[str, Any]:
    """``dkms-2.8.7`` / ``dkms-3.0.10`` -> {version, scheme}; scheme "framework-conf" | "shim-signed".

    An unknown version (no dkms yet, e.g. in --check before it is installed) is taken as a
    current one: the signature check after the build catches a wrong guess.
    """
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version_output or "")
    if not m:
        return {"version": None, "scheme": "framework-conf"}
    parts = tuple(int(p or 0) for p in m.groups())
    scheme = "framework-conf" if parts >= FRAMEWORK_CONF_SINCE else "shim-signed"
    return {"version": m.group(0), "scheme": scheme}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_dkms_signing": dkms_signing}
