"""`plan` resolves once per distinct host description, not once per host (issue 26's benchmark:
1,000 described hosts spent most of plan resolving alike hosts one by one). The resolver is pure,
so the groups are what resolving every host gives; these tests count the real resolver's calls
and compare with a resolve of each host on its own. The probed host is the HGX H100 Ubuntu 22.04
scenario of test_probe_facts (the real parsers over the real tools' output).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from provision.config import Config
from provision.errors import Unsatisfiable
from provision.fleet.planning import Assumed, _resolve_groups, _Target, _unique_names
from provision.hosts import gather
from provision.hosts.facts import HostFacts
from provision.model.lock import LockGroup
from provision.stack import resolve as resolve_module
from provision.stack.request import StackRequest
from tests.support.probe_fixtures import OPTIONS, hgx_ubuntu_2204


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real resolver, counted (planning imports it from its module when it plans)."""
    seen: list[str] = []
    real = resolve_module.resolve

    def counted(request, host, knowledge=None):  # type: ignore[no-untyped-def]
        seen.append(str(request.host_python))
        return real(request, host, knowledge)

    monkeypatch.setattr(resolve_module, "resolve", counted)
    return seen


def _one_by_one(targets: list[_Target], request: StackRequest, assume: Assumed | None) -> list[LockGroup]:
    """Each host resolved on its own (a fresh memo per host), the groups merged by name as plan's
    would be: what plan gave before it kept one resolution per description."""
    merged: dict[str, LockGroup] = {}
    for t in targets:
        [g] = _resolve_groups([t], request, assume)
        key = repr((g.host, g.stack, g.packages))
        merged[key] = replace(merged[key], hosts=[*merged[key].hosts, *g.hosts]) if key in merged else g
    return _unique_names(list(merged.values()))


def _hgx(name: str, **changes: object) -> _Target:
    facts: HostFacts = gather.facts_from_sections(hgx_ubuntu_2204(), OPTIONS)
    return _Target(name, {}, facts=replace(facts, **changes))  # type: ignore[arg-type]


def test_alike_described_hosts_are_resolved_once(calls: list[str]) -> None:
    request = StackRequest.build(**Config().request_args())
    assume = Assumed(os="ubuntu-22.04", gpu="H100-SXM", gpu_count=8)
    targets = [_Target(f"gpu{i}", {}) for i in range(6)]
    [group] = _resolve_groups(targets, request, assume)
    assert len(calls) == 1
    assert group.hosts == [f"gpu{i}" for i in range(6)]
    calls.clear()
    [alone] = _one_by_one(targets, request, assume)
    assert len(calls) == 6
    assert group.to_json() == alone.to_json()


def test_probed_hosts_share_a_resolution_only_when_their_description_is_the_same(calls: list[str]) -> None:
    """A host whose python3 differs is resolved on its own, and so is one that keeps another
    driver: with ``driver: none`` the resolver checks the wheels against the driver the probe
    found (tests/unit/stack/test_resolve_found_driver.py), so the kept driver is part of the input."""
    request = StackRequest.build(**Config().request_args({"driver": "none"}))
    base = gather.facts_from_sections(hgx_ubuntu_2204(), OPTIONS)
    other_python = "3.12" if base.python != "3.12" else "3.11"
    targets = [
        _hgx("a"),
        _hgx("b"),
        _hgx("c", python=other_python, venv=None),
        _hgx("d", driver=replace(base.driver, version="570.195.03")),
    ]
    groups = _resolve_groups(targets, request, None)
    assert sorted(calls) == sorted([str(base.python), str(base.python), other_python])  # a and b alike
    assert [g.hosts for g in groups] == [["a", "b"], ["c"], ["d"]]
    assert [g.host.kept_driver for g in groups] == ["580.95.05", "580.95.05", "570.195.03"]
    calls.clear()
    alone = _one_by_one(targets, request, None)
    assert len(calls) == 4
    assert [g.to_json() for g in groups] == [g.to_json() for g in alone]


def test_the_first_host_that_cannot_be_planned_is_named() -> None:
    """A failure is raised at the first host of its description, named as before."""
    request = StackRequest.build(**Config().request_args({"driver": "580"}))
    targets = [_Target(f"old{i}", {}) for i in range(3)]
    with pytest.raises(Unsatisfiable) as err:
        _resolve_groups(targets, request, Assumed(os="ubuntu-22.04", gpu="K80", gpu_count=1))
    assert err.value.message.startswith("old0: ")


def test_a_group_is_named_by_what_it_is_not_by_the_hosts_planned_beside_it() -> None:
    """The name is the health spec's and Prometheus' ``group``: a host that keeps another driver
    keeps its group's name whether the run plans it alone (``--limit``) or with the fleet, and so
    do the hosts beside it. Before, the second group of a GPU and OS was ``<label>_2`` in the
    fleet's plan and ``<label>`` in one host's, and `up --limit` re-applied a converged host."""
    request = StackRequest.build(**Config().request_args({"driver": "none"}))
    base = gather.facts_from_sections(hgx_ubuntu_2204(), OPTIONS)
    fleet = [_hgx("a"), _hgx("d", driver=replace(base.driver, version="570.195.03")), _hgx("e")]
    names = {h: g.name for g in _resolve_groups(fleet, request, None) for h in g.hosts}
    assert names == {
        "a": "h100_sxm_x8_ubuntu_22_04_driver_580_95_05",
        "d": "h100_sxm_x8_ubuntu_22_04_driver_570_195_03",
        "e": "h100_sxm_x8_ubuntu_22_04_driver_580_95_05",
    }
    for t in fleet:
        [alone] = _resolve_groups([t], request, None)
        assert alone.name == names[t.name]
    # a stack that installs the driver keeps nothing: the plain label
    installs = StackRequest.build(**Config().request_args({"driver": "580"}))
    assert [g.name for g in _resolve_groups(fleet, installs, None)] == ["h100_sxm_x8_ubuntu_22_04"]
