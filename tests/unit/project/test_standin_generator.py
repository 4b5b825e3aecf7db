"""The stand-in NVIDIA repository's generator and the Debian 13 host set's names, without a host
(tests/integration/standin_repo.py, standin_plans.py, tests/hosts/harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts import harness
from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr


def _by_name(debs: list[sr.Deb]) -> dict[str, sr.Deb]:
    return {d.name: d for d in debs}


def test_the_default_plan_makes_nvidias_names_versions_and_relationships() -> None:
    plan = sp.apt_plan("debian12", "595.58.03", fabric_manager=True, cuda=("12.8", "12.8.93"), cudnn="9.10.2.21")
    debs = _by_name(sr.debs_for_plan(plan))
    assert {name: d.version for name, d in debs.items()} == {
        "nvidia-driver-pinning-595.58.03": "595.58.03-1",  # unversioned in the plan: the name carries it
        "nvidia-open": "595.58.03-1",
        "nvidia-kernel-open-dkms": "595.58.03-1",
        "libnvidia-compute": "595.58.03-1",
        "nvidia-persistenced": "595.58.03-1",
        "nvidia-fabricmanager": "595.58.03-1",
        "cuda-toolkit-12-8": "12.8.93-1",
        "cudnn9-cuda-12": "9.10.2.21-1",
        "libcudnn9-cuda-12": "9.10.2.21-1",
        "libcudnn9-dev-cuda-12": "9.10.2.21-1",
        "libcudnn9-headers-cuda-12": "9.10.2.21-1",
    }
    assert "Depends: nvidia-kernel-open-dkms (>= 595.58.03-1)" in debs["nvidia-open"].extra
    assert "Depends: kmod\nConflicts: nvidia-kernel-dkms" in debs["nvidia-kernel-open-dkms"].extra
    [(path, pin, _)] = debs["nvidia-driver-pinning-595.58.03"].files
    assert path == "/etc/apt/preferences.d/nvidia-driver-pin" and "Pin: version 595.58.03-*\n" in pin


def test_below_590_the_names_carry_the_branch_and_fabric_manager_loses_it_at_580() -> None:
    old = _by_name(sr.debs_for_plan(sp.apt_plan("debian12", "575.51.03", fabric_manager=True)))
    assert {"nvidia-open-575", "nvidia-fabricmanager-575"} <= set(old)
    assert "Provides: nvidia-fabricmanager\nConflicts: nvidia-fabricmanager" in old["nvidia-fabricmanager-575"].extra
    ltsb = _by_name(sr.debs_for_plan(sp.apt_plan("debian12", "580.95.05", fabric_manager=True)))
    assert {"nvidia-open-580", "nvidia-fabricmanager"} <= set(ltsb) and "nvidia-fabricmanager-580" not in ltsb


def test_the_repository_offers_every_pinning_package_and_each_release_once() -> None:
    plans = [sp.apt_plan("debian12", v) for v in ("580.95.05", "595.45.04", "595.58.03", "595.58.03")]
    versions = [(d.name, d.version) for d in sr.repository_debs(plans)]
    assert len(versions) == len(set(versions))
    assert {
        ("nvidia-driver-pinning-580", "580-1"),
        ("nvidia-driver-pinning-595", "595-1"),
        ("nvidia-driver-pinning-580.95.05", "580.95.05-1"),
        ("nvidia-driver-pinning-595.45.04", "595.45.04-1"),
        (f"linux-headers-{sr.STANDIN_KERNEL}", "1.0"),
    } <= set(versions)


def test_only_the_stood_in_repositories_entries_are_made() -> None:
    plan = sp.apt_plan("debian13", "595.58.03", kernel="6.12.57+deb13-amd64")
    assert plan["install"][0] == {
        "name": "linux-headers-6.12.57+deb13-amd64",
        "version": None,
        "role": "nvidia_driver",
        "repository": None,
    }
    assert all(not d.name.startswith("linux-headers-6.12") for d in sr.debs_for_plan(plan))
    assert plan["repositories"][0]["key_url"].endswith("/debian13/x86_64/8793F200.pub")
    assert sr.KEY_FILES["debian13"] == "8793F200.pub"


def test_what_the_generator_refuses() -> None:
    with pytest.raises(KeyError, match="no stand-in rule for 'nvidia-imex'"):
        sr.rule_for("nvidia-imex")
    with pytest.raises(ValueError, match="an apt repository"):
        sr.debs_for_plan({"manager": "dnf", "install": []})
    with pytest.raises(ValueError, match="not an apt version expression"):
        sr.deb_version("3:595.58.03")
    assert sr.deb_version("595.58.03-*") == "595.58.03-1"


@pytest.mark.parametrize("version", ["570.124.06", "580.95.05", "595.58.03"])
def test_the_stand_in_carries_the_names_the_resolvers_plan_installs(version: str) -> None:
    """The stand-in is built from the facts (standin_plans.apt_plan); the role tests install the
    resolver's plan (the packaging table) from it. The two must name the same packages, or a role
    test would fail for a reason no real repository has."""
    from tests.integration import roles_harness as rh

    group = rh.hgx_group(["h"], version)
    resolved = [(e["name"], e["version"]) for e in group["packages"]["install"]]
    standin = [(e["name"], e["version"]) for e in sp.apt_plan("debian12", version, fabric_manager=True)["install"]]
    assert resolved == standin
    toolkit = rh.hgx_group(["h"], version, cuda_toolkit="12.8", cudnn="9.10.2.21")
    roles = ("cuda_toolkit", "cudnn")
    resolved = [e["name"] for e in toolkit["packages"]["install"] if e["role"] in roles]
    plan = sp.apt_plan("debian12", version, fabric_manager=True, cuda=("12.8", "12.8.93"), cudnn="9.10.2.21")
    assert resolved == [e["name"] for e in plan["install"] if e["role"] in roles]


def test_the_stand_in_takes_the_place_of_nvidias_repository_in_a_plan() -> None:
    moved = sp.standin_repository(sp.apt_plan("debian12", "595.58.03"), "http://10.0.0.1:80/r", "k.pub", "F" * 40)
    assert moved["repositories"] == [
        {
            "name": "cuda",
            "url": "http://10.0.0.1:80/r/",
            "key_url": "http://10.0.0.1:80/r/k.pub",
            "key_fingerprint": "F" * 40,
        }
    ]


def test_the_debian13_set_is_derived_so_that_no_two_sets_meet() -> None:
    sets = [
        {"directory": Path("/var/tmp/pt-sd"), "prefix": "sd", "net": "10.203.0", "bridge": "sdbr0"},
        {"directory": Path("/var/tmp/provision-testhosts"), "prefix": "th", "net": "10.200.0", "bridge": "thbr0"},
    ]
    derived = [harness.debian13_settings(s) for s in sets]
    assert derived[0] == {
        "directory": Path("/var/tmp/pt-sd-trixie"),
        "prefix": "tsd",
        "net": "10.203.13",
        "bridge": "tsdbr0",
        "suite": "trixie",
        "base": harness.TRIXIE_BASE_DIR,
    }
    names = [s[k] for s in sets + derived for k in ("directory", "prefix", "net", "bridge")]
    assert len(names) == len(set(names))
    # the Debian 12 set's leftovers check matches names by prefix: the Debian 13 hosts' do not start with it
    assert not any(d["prefix"].startswith(s["prefix"]) for s, d in zip(sets, derived, strict=True))
    assert all(len(f"{d['prefix']}1-h") <= 15 for d in derived)  # a veth name's limit


def test_the_stand_in_has_nvidia_open_branch_names_from_570_only() -> None:
    """Issue 27 fact 3: NVIDIA's apt repository has no nvidia-open-<branch> below 570 (the open
    flavour there is nvidia-kernel-open-<b> then cuda-drivers-<b>), and neither has the stand-in."""
    for branch in ("570", "575", "580"):
        assert sr.rule_for(f"nvidia-open-{branch}")[1] == {"branch": branch}
    assert sr.rule_for("nvidia-open")[1] == {}
    for branch in ("535", "550", "565"):
        with pytest.raises(KeyError, match=f"no stand-in rule for 'nvidia-open-{branch}'"):
            sr.rule_for(f"nvidia-open-{branch}")


def test_each_xdist_worker_has_a_set_that_meets_no_other() -> None:
    """Integration modules run on two xdist workers (`pytest -n 2 tests/integration`; `make test`
    runs one process) each make their own sets (Debian 12, the Debian 13 one and test_up_bundle's):
    no two share a directory, a bridge or a /24, and no prefix is the start of another's
    (``testhosts.sh down`` and leftovers() take every name that starts with the set's prefix)."""
    first = {"directory": Path("/var/tmp/provision-testhosts"), "prefix": "th", "net": "10.200.0", "bridge": "thbr0"}
    assert harness.worker_settings(first, 0) == first
    sets = []
    for n in (0, 1):
        mine = harness.worker_settings(first, n)
        sets += [mine, harness.debian13_settings(mine), harness.bundle_settings(mine)]
    for key in ("directory", "net", "bridge"):
        assert len({str(s[key]) for s in sets}) == len(sets), key
    prefixes = [str(s["prefix"]) for s in sets]
    assert not [(a, b) for a in prefixes for b in prefixes if a != b and b.startswith(a)]
    assert harness.worker_settings(first, 1)["net"] == "10.200.50"
