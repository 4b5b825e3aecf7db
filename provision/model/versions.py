"""The one rule for "is the installed version the locked one": used on hosts and on the controller.

The smoke job's verdict (on the host), the lock's drift (``provision status --check-drift``),
the planner's "already installed" and the verify role (its filter
``playbooks/roles/verify/filter_plugins/version_rule.py`` loads this file) all call
:func:`version_matches`; ``tests/unit/model/test_version_rule.py`` proves they agree on one table of
cases. Standard library only, importing nothing: the controller imports it from here, the smoke
job's bundle carries it to hosts as ``smoke/versions.py`` (:data:`provision.remote.smoke.SOURCES`),
and a `plan --out` run dir carries it for the verify role (``roles/verify/files/versions.py``).

The rule:

- ``None`` (or ``"none"``) expected means "not installed": only a missing version matches it; a
  missing version matches nothing else.
- Release parts compare part by part, as strings (NVIDIA's ``580.95.05`` keeps its ``05``); the
  expectation may be shorter than what is installed (``580`` matches ``580.95.05``, ``3.11`` matches
  ``3.11.2``, ``12.8`` matches ``12.8.93``), and an installed version shorter than the expectation
  matches when the parts it lacks are zeros (``2.8`` is ``2.8.0``, as PEP 440 has it).
- A local tag (``+cu128``) counts only when the expectation has one: ``2.8.0`` accepts the wheel's
  own ``2.8.0+cu128``, ``2.8.0+cu126`` does not accept ``2.8.0+cu128`` nor ``2.8.0``. Which CUDA
  build a tag-less expectation wants is :func:`build_matches`' question (the lock's ``variant``).
- cuDNN compares as dotted ``major.minor.patch``: torch reports an integer (``91002``), the lock
  names the build too (``9.10.2.21``); both sides are read as dotted and the build part dropped.
"""

from __future__ import annotations

import re


def _parts(version: str) -> list[str]:
    return [p for p in re.split(r"[.]", version.strip()) if p != ""]


def split_local(version: str) -> tuple[str, str | None]:
    """``"2.8.0+cu128"`` -> (``"2.8.0"``, ``"cu128"``); no tag -> (``version``, None)."""
    base, _, local = version.strip().partition("+")
    return base, (local or None)


def cudnn_dotted(value: str) -> str:
    """torch reports cuDNN as an integer (9.10.2 -> 91002, 8.9.7 -> 8907); give it dotted."""
    if not value.isdigit():
        return value
    number = int(value)
    if number >= 90000:  # cuDNN 9+: major * 10000 + minor * 100 + patch
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"  # cuDNN <= 8


def cudnn_number(version: str) -> str:
    """``"9.10.2.21"`` -> ``"91002"``: the integer torch.backends.cudnn.version() reports.

    cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + minor*100 + patch.
    """
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return str(major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch)


def _absent(version: str | None) -> bool:
    return version is None or version.strip().lower() == "none"


def version_matches(key: str, actual: str | None, expected: str | None) -> bool:
    """Whether the installed ``actual`` satisfies ``expected`` for item ``key`` (see the module doc)."""
    if _absent(expected) or _absent(actual):
        return _absent(expected) and _absent(actual)
    assert actual is not None and expected is not None
    if key == "cudnn":
        have, want = _parts(cudnn_dotted(actual))[:3], _parts(cudnn_dotted(expected))[:3]
        return have[: len(want)] == want
    have_base, have_tag = split_local(actual)
    want_base, want_tag = split_local(expected)
    if want_tag is not None and have_tag != want_tag:
        return False
    have, want = _parts(have_base), _parts(want_base)
    padded = have + ["0"] * max(0, len(want) - len(have))
    return padded[: len(want)] == want


def build_matches(actual: str | None, variant: str | None) -> bool:
    """Whether an installed wheel's local tag is the locked ``variant`` (``cu128``, ``cpu``).

    A wheel without a tag (PyPI's default build) or a lock without a variant does not disagree.
    """
    tag = split_local(actual)[1] if actual else None
    return tag is None or variant is None or tag == variant
