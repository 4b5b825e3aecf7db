"""`provision advise cost`: the issue's formulas against hand-computed cases, prices from the
knowledge data with their date, bad input as one line with exit 2, and the plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from provision.advise import cost as c
from provision.cli.app import cli
from provision.matrix import load
from tests.cli_run import provision


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["advise", "cost", *args])


def test_hand_computed_case_rent() -> None:
    # cloud 2 USD/h x 8 h x 365 = 5840; own 30000/3 + 2000 + 1.5 kW x 8 h x 365 x 0.20 = 12876;
    # break-even (10000 + 2000) / (365 x (2 - 0.3)) = 12000 / 620.5 = 19.339...
    i = c.CostInputs(
        cloud_price=2,
        hours_per_day=8,
        server_price=30000,
        years=3,
        power_kw=1.5,
        electricity=0.2,
        ops_per_year=2000,
    )
    r = c.compute(i)
    assert r.cloud_per_year == pytest.approx(5840.0)
    assert r.own_per_year == pytest.approx(12876.0)
    assert r.break_even_hours_per_day == pytest.approx(12000 / 620.5)
    assert r.recommendation == "cloud"
    assert r.savings_per_year == pytest.approx(7036.0)


def test_hand_computed_case_buy() -> None:
    # cloud 10 x 20 x 365 = 73000; own 40000/4 + 5000 + 2 x 20 x 365 x 0.25 = 18650;
    # break-even 15000 / (365 x (10 - 0.5)) = 15000 / 3467.5 = 4.3259...
    i = c.CostInputs(
        cloud_price=10,
        hours_per_day=20,
        server_price=40000,
        years=4,
        power_kw=2,
        electricity=0.25,
        ops_per_year=5000,
    )
    r = c.compute(i)
    assert r.cloud_per_year == pytest.approx(73000.0)
    assert r.own_per_year == pytest.approx(18650.0)
    assert r.break_even_hours_per_day == pytest.approx(15000 / 3467.5)
    assert r.recommendation == "own"
    # at the break-even usage both yearly costs are equal: the formula is consistent with the others
    h = r.break_even_hours_per_day
    assert h is not None
    assert c.cloud_per_year(10, h) == pytest.approx(c.own_per_year(i, h))


def test_never_breaks_even_when_cloud_hour_is_cheaper_than_own_power() -> None:
    # 0.30 USD/h in the cloud against 1 kW x 0.40 USD/kWh = 0.40 USD/h of own power: the
    # denominator is negative, owning never catches up.
    i = c.CostInputs(cloud_price=0.3, hours_per_day=24, server_price=5000, power_kw=1, electricity=0.4)
    r = c.compute(i)
    assert r.break_even_hours_per_day is None
    assert r.recommendation == "cloud"
    assert r.cloud_per_year == pytest.approx(0.3 * 24 * 365)


def test_never_breaks_even_within_a_day() -> None:
    # (90000/3) / (365 x 1) = 82.2 h/day: past 24, so the cloud is cheaper at any usage.
    i = c.CostInputs(cloud_price=1, hours_per_day=24, server_price=90000)
    r = c.compute(i)
    assert r.break_even_hours_per_day is None
    assert r.recommendation == "cloud"


def test_json_keys_and_inputs_echoed() -> None:
    res = invoke(
        "--cloud-price",
        "2",
        "--hours-per-day",
        "8",
        "--server-price",
        "30000",
        "--power-kw",
        "1.5",
        "--electricity",
        "0.2",
        "--ops-per-year",
        "2000",
        "--json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["cloud_per_year"] == 5840.0
    assert doc["own_per_year"] == 12876.0
    assert doc["break_even_hours_per_day"] == round(12000 / 620.5, 3)
    assert doc["recommendation"] == "cloud"
    assert doc["inputs"] == {
        "cloud_price": 2.0,
        "hours_per_day": 8.0,
        "server_price": 30000.0,
        "years": 3.0,
        "power_kw": 1.5,
        "electricity": 0.2,
        "ops_per_year": 2000.0,
    }
    assert doc["cloud_price"]["origin"] == "flag"
    # given power and ops are not marked as defaults; only --years was left at its default
    by_name = {a["name"]: a for a in doc["assumptions"]}
    assert [n for n, a in by_name.items() if a["origin"] == "default"] == ["years"]
    assert by_name["cloud_price"]["origin"] == "given" and by_name["cloud_price"]["flag"] == "--cloud-price"
    assert "1.5 kW" in by_name["power_kw"]["meaning"] and "0.2 USD per kWh" in by_name["electricity"]["meaning"]


def test_never_breaks_even_json_is_null() -> None:
    res = invoke(
        "--cloud-price",
        "0.3",
        "--hours-per-day",
        "24",
        "--server-price",
        "5000",
        "--power-kw",
        "1",
        "--electricity",
        "0.4",
        "--json",
    )
    assert res.exit_code == 0
    assert json.loads(res.stdout)["break_even_hours_per_day"] is None


def test_instance_type_price_comes_from_the_knowledge_with_its_date() -> None:
    priced = next(it for it in load().instance_types if it.price is not None)
    assert priced.price is not None
    res = invoke("--instance-type", priced.name.upper(), "--hours-per-day", "12", "--server-price", "250000", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    p = doc["cloud_price"]
    assert p["origin"] == "knowledge"
    assert p["instance_type"] == priced.name
    assert p["usd_per_hour"] == priced.price.usd_per_hour
    assert p["read"] == priced.price.read
    assert p["source"] == list(priced.price.source)
    assert doc["cloud_per_year"] == round(priced.price.usd_per_hour * 12 * 365, 2)


def test_human_output_names_price_date_and_choice() -> None:
    res = invoke("--instance-type", "p5.48xlarge", "--hours-per-day", "24", "--server-price", "300000")
    assert res.exit_code == 0, res.output
    read = load().instance_type("p5.48xlarge").price
    assert read is not None
    assert f"price read      {read.read}" in res.stdout
    assert "buy your own server" in res.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--cloud-price", "2", "--hours-per-day", "25", "--server-price", "1"],
            "--hours-per-day 25 is outside 0-24",
        ),
        (["--cloud-price", "2", "--hours-per-day", "-1", "--server-price", "1"], "outside 0-24"),
        (
            ["--cloud-price", "-2", "--hours-per-day", "2", "--server-price", "1"],
            "--cloud-price -2 is negative",
        ),
        (
            ["--cloud-price", "2", "--hours-per-day", "2", "--server-price", "-1"],
            "--server-price -1 is negative",
        ),
        (
            ["--cloud-price", "2", "--hours-per-day", "2", "--server-price", "1", "--electricity", "-0.1"],
            "--electricity -0.1 is negative",
        ),
        (["--cloud-price", "2", "--hours-per-day", "2", "--server-price", "1", "--years", "0"], "--years 0"),
        (
            ["--instance-type", "p5.48xlarg", "--hours-per-day", "2", "--server-price", "1"],
            "unknown EC2 instance type `p5.48xlarg` (did you mean p5.48xlarge",
        ),
        (["--hours-per-day", "2", "--server-price", "1"], "exactly one of --cloud-price and --instance-type"),
        (
            ["--cloud-price", "inf", "--hours-per-day", "2", "--server-price", "1"],
            "--cloud-price inf is not a finite",
        ),
        (
            ["--cloud-price", "1", "--hours-per-day", "nan", "--server-price", "1"],
            "--hours-per-day nan is not a finite",
        ),
        (
            ["--cloud-price", "2", "--spot", "--hours-per-day", "2", "--server-price", "1"],
            "--spot needs --instance-type",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    res = invoke(*args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    assert needle in lines[0]
    assert res.stdout == ""


def test_spot_without_spot_data_is_a_clear_bad_input_line() -> None:
    priced = next(it for it in load().instance_types if it.price is not None)
    res = invoke("--instance-type", priced.name, "--spot", "--hours-per-day", "4", "--server-price", "1", "--json")
    assert res.exit_code == 2
    doc = json.loads(res.stdout)
    assert doc["error"]["code"] == "bad_input"
    assert f"no spot price for `{priced.name}`" in doc["error"]["message"]
    assert "--cloud-price" in doc["error"]["hint"]


def test_unpriced_instance_type_asks_for_the_price() -> None:
    unpriced = next(it for it in load().instance_types if it.price is None)
    res = invoke("--instance-type", unpriced.name, "--hours-per-day", "4", "--server-price", "1")
    assert res.exit_code == 2
    assert f"no on-demand price for `{unpriced.name}`" in res.stderr


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "cost.png"
    res = invoke("--cloud-price", "2", "--hours-per-day", "8", "--server-price", "30000", "--plot", str(out), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["plot"] == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 5000  # lines, axes and labels, not an empty canvas


def test_plot_without_matplotlib_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import matplotlib` raise ImportError, as on a host without it.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "cost.png"
    res = invoke("--cloud-price", "2", "--hours-per-day", "8", "--server-price", "30000", "--plot", str(out))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert "provision-gpu[plot]" in res.stderr
    assert not out.exists()


def test_plot_into_a_missing_folder_fails_before_work(tmp_path: Path) -> None:
    res = invoke(
        "--cloud-price",
        "2",
        "--hours-per-day",
        "8",
        "--server-price",
        "1",
        "--plot",
        str(tmp_path / "nope" / "x.png"),
    )
    assert res.exit_code == 2
    assert "does not exist" in res.stderr


# --- g5.xlarge from the data, every assumption stated (the real CLI) -------------------------

EC2 = Path(c.__file__).parents[1] / "matrix" / "data" / "ec2.yaml"


def _data_price(name: str) -> dict[str, Any]:
    """ec2.yaml's price entry for ``name``, read as plain YAML (not through the loader)."""
    for fam in yaml.safe_load(EC2.read_text())["instance_families"]:
        if name in (fam.get("prices") or {}):
            return dict(fam["prices"][name])
    raise AssertionError(f"{name} has no price in ec2.yaml")


def test_cli_g5_xlarge_cost_from_the_data_with_its_read_date(monkeypatch: pytest.MonkeyPatch) -> None:
    price = _data_price("g5.xlarge")
    res = provision(
        "advise", "cost", "--instance-type", "g5.xlarge", "--hours-per-day", "8", "--server-price", "5000", "--json"
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    usd = float(price["usd_per_hour"])
    assert doc["cloud_price"]["usd_per_hour"] == usd
    assert doc["cloud_price"]["read"] == price["read"]
    assert doc["cloud_per_year"] == round(usd * 8 * 365, 2)
    assert doc["own_per_year"] == round(5000 / 3, 2)  # no power, no ops: both defaulted to 0
    assert doc["break_even_hours_per_day"] == round((5000 / 3) / (365 * usd), 3)
    by_name = {a["name"]: a for a in doc["assumptions"]}
    assert set(by_name) == {
        "cloud_price",
        "hours_per_day",
        "server_price",
        "years",
        "power_kw",
        "electricity",
        "ops_per_year",
    }
    for name in ("years", "power_kw", "electricity", "ops_per_year"):
        assert by_name[name]["origin"] == "default", name
    assert by_name["hours_per_day"]["origin"] == by_name["server_price"]["origin"] == "given"
    assert by_name["cloud_price"]["origin"] == "knowledge"
    assert price["read"] in by_name["cloud_price"]["meaning"]
    assert "skypilot-catalog" in by_name["cloud_price"]["meaning"]  # the source's URL, not only its id
    assert "33% utilization" in by_name["hours_per_day"]["meaning"]  # 8 of 24 hours
    monkeypatch.setenv("COLUMNS", "200")
    human = provision(
        "advise", "cost", "--instance-type", "g5.xlarge", "--hours-per-day", "8", "--server-price", "5000"
    )
    assert human.returncode == 0, human.stderr
    out = human.stdout
    assert f"cloud price     {usd:g} USD/h (g5.xlarge on-demand)" in out
    assert f"cloud per year  {usd * 8 * 365:>12,.2f} USD" in out
    for flag in ("--power-kw", "--electricity", "--ops-per-year", "--years"):
        assert f"(default; set with {flag})" in out, flag
    assert "not counted (0)" in out and "amortization over 3 years" in out


def test_cli_misspelt_instance_type_is_one_line_with_near_names() -> None:
    res = provision("advise", "cost", "--instance-type", "g5.xlarg", "--hours-per-day", "8", "--server-price", "1")
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: unknown EC2 instance type `g5.xlarg`")
    assert "g5.xlarge" in lines[0]
