"""`provision advise gpu`: memory estimates against published figures, the GPUs and instance
types that fit (fewest GPUs, cheapest first), and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from provision.advise import gpu as g
from provision.cli.app import cli
from provision.matrix import load
from tests.cli_run import provision

GB = 1e9


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["advise", "gpu", *args])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("7e9", 7e9),
        ("7B", 7e9),
        ("70b", 70e9),
        ("350M", 350e6),
        ("1.5T", 1.5e12),
        ("7000000000", 7e9),
        ("7_000_000_000", 7e9),
        ("13 B", 13e9),
    ],
)
def test_parse_params(text: str, value: float) -> None:
    assert g.parse_params(text) == pytest.approx(value)


def test_7b_bf16_inference_is_14_to_20_gib() -> None:
    # The figure; also EleutherAI, "Transformer Math 101" (blog.eleuther.ai/transformer-math,
    # 2023): inference needs about 1.2 x the weights, 7B in 16-bit -> ~16.8 GB.
    est = g.estimate(g.ModelSpec(params=7e9, precision="bf16", mode="inference"))
    assert 14 <= est.memory_gib <= 20
    assert est.breakdown["weights"] == pytest.approx(7e9 * 2 / 2**30)


def test_7b_adam_mixed_precision_training_before_activations() -> None:
    # ZeRO (Rajbhandari et al. 2019, arXiv:1910.02054, sec. 3.1): mixed-precision Adam keeps
    # 2 + 2 + 12 = 16 bytes per parameter ("a 7.5B model ... at least 120 GB"). The issue: 7e9
    # with Adam in mixed precision needs about 100-160 GiB before activations.
    est = g.estimate(g.ModelSpec(params=7e9, precision="bf16", mode="train", optimizer="adam"))
    assert 100 <= est.static_gib <= 160
    assert est.static_gib * 2**30 / 7e9 == pytest.approx(16.0)
    assert est.memory_gib > est.static_gib + est.breakdown["activations"]  # overhead on top
    zero = g.estimate(g.ModelSpec(params=7.5e9, precision="fp16", mode="train"))
    assert zero.static_gib * 2**30 == pytest.approx(120 * GB)


def test_sgd_keeps_one_state_and_fp32_no_master_copy() -> None:
    sgd = g.estimate(g.ModelSpec(params=1e9, precision="bf16", mode="train", optimizer="sgd"))
    assert sgd.static_gib * 2**30 / 1e9 == pytest.approx(2 + 2 + 4 + 4)
    fp32 = g.estimate(g.ModelSpec(params=1e9, precision="fp32", mode="train", optimizer="adam"))
    assert "master_weights" not in fp32.breakdown
    assert fp32.static_gib * 2**30 / 1e9 == pytest.approx(4 + 4 + 8)


def test_70b_weights_match_published_140_gb() -> None:
    # Hugging Face, "Llama 2 is here" (huggingface.co/blog/llama2, 2023): the 70B model needs
    # ~140 GB in 16-bit for its weights alone.
    est = g.estimate(g.ModelSpec(params=70e9, precision="fp16"))
    assert est.breakdown["weights"] * 2**30 == pytest.approx(140 * GB)
    int4 = g.estimate(g.ModelSpec(params=70e9, precision="int4"))
    assert int4.breakdown["weights"] * 2**30 == pytest.approx(35 * GB)


def test_inferred_shape_and_kv_cache_near_llama_2_7b() -> None:
    # LLaMA-2-7B: 32 layers x 4096 hidden (Touvron et al. 2023, arXiv:2307.09288); its fp16 KV
    # cache is 2 x 32 x 4096 x 2 bytes = 0.5 MiB per token.
    shape = g.infer_shape(6.7e9)
    assert abs(shape.layers - 32) <= 2
    assert abs(shape.hidden - 4096) / 4096 < 0.05
    est = g.estimate(g.ModelSpec(params=6.7e9, batch=1, seq_len=4096))
    per_token = est.breakdown["kv_cache"] * 2**30 / 4096
    assert per_token == pytest.approx(0.5 * 2**20, rel=0.10)


def test_activations_grow_with_batch_and_sequence() -> None:
    small = g.estimate(g.ModelSpec(params=1e9, mode="train", batch=1, seq_len=1024))
    big = g.estimate(g.ModelSpec(params=1e9, mode="train", batch=4, seq_len=2048))
    assert big.breakdown["activations"] == pytest.approx(8 * small.breakdown["activations"])
    assert big.breakdown["weights"] == small.breakdown["weights"]


def test_fewest_gpus_and_split_per_gpu() -> None:
    est = g.estimate(g.ModelSpec(params=7e9, mode="train"))
    n = g.gpus_needed(est, 80.0, 64)
    assert n == 2
    assert est.per_gpu_gib(2) <= 80 < est.per_gpu_gib(1)
    assert g.gpus_needed(est, 10.0, 8) is None


def test_recommendations_cheapest_first_with_prices_from_data() -> None:
    k = load()
    est = g.estimate(g.ModelSpec(params=7e9, precision="bf16", mode="inference"))
    recs, excluded = g.recommend(est, k.gpus, k.instance_types)
    priced = [r for r in recs if r.usd_per_hour is not None]
    assert priced, "the knowledge has some on-demand prices"
    assert recs[: len(priced)] == priced  # priced ones first
    assert [r.usd_per_hour for r in priced] == sorted(r.usd_per_hour for r in priced)  # type: ignore[misc]
    for r in recs:
        assert r.per_gpu_gib <= r.gpu_memory_gib
        if r.count > 1:  # the fewest GPUs: one less would not hold it
            assert est.per_gpu_gib(r.count - 1) > r.gpu_memory_gib
    # a 16 GiB T4 cannot hold ~17 GiB, and has no bf16 anyway (compute capability 7.5)
    assert {"gpu": "T4", "why": "no native bf16 (compute capability 7.5)"} in excluded
    for r in priced:
        it = k.instance_type(r.instance_type or "")
        assert it.price is not None
        assert r.usd_per_hour == pytest.approx(it.price.usd_per_hour * r.instances)
        assert r.price_read == it.price.read


def test_fp8_needs_ada_or_newer() -> None:
    k = load()
    est = g.estimate(g.ModelSpec(params=7e9, precision="fp8"))
    recs, excluded = g.recommend(est, k.gpus, k.instance_types)
    assert "A100-80GB" in {e["gpu"] for e in excluded}
    assert all(k.gpu(r.gpu).cc >= (8, 9) for r in recs)
    assert "H100-SXM" in {r.gpu for r in recs}


def test_cli_json_shape() -> None:
    res = invoke("--params", "7B", "--mode", "train", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] is True
    assert doc["estimate"] is True
    assert set(doc["breakdown"]) == {
        "weights",
        "gradients",
        "master_weights",
        "optimizer_states",
        "activations",
        "runtime_overhead",
    }
    assert doc["memory_gib"] == pytest.approx(sum(doc["breakdown"].values()), abs=0.05)
    first = doc["recommendations"][0]
    assert {"gpu", "count", "instance_type", "usd_per_hour"} <= set(first)
    assert first["usd_per_hour"] is not None


def test_cli_human_table() -> None:
    res = invoke("--params", "7e9")
    assert res.exit_code == 0, res.output
    assert "7B parameters, bf16, inference" in res.stdout
    assert "(estimate)" in res.stdout
    assert "H100-SXM" in res.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--params", "7x"], "--params `7x` is not a parameter count"),
        (["--params", "12"], "--params `12` is 12 parameters"),
        (["--params", "7e30"], "--params `7e30` is 7e+30 parameters"),
        (["--params", "7B", "--precision", "int4", "--mode", "train"], "--mode train with --precision int4"),
        (["--params", "7B", "--batch", "0"], "--batch 0 is not positive"),
        (["--params", "7B", "--precision", "fp64"], "'fp64' is not one of"),
    ],
)
def test_bad_input(args: list[str], needle: str) -> None:
    res = invoke(*args)
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert needle in res.stderr


# --- LoRA / QLoRA, interconnect caveats, the g families priced -------------------------------
# Expected numbers below come from the data files read as plain YAML and from the papers'
# formulas, not from the estimator: a change of the code's arithmetic shows here.

DATA = Path(g.__file__).parents[1] / "matrix" / "data"
GIB = 2**30


def _yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def _constants() -> dict[str, float]:
    return {c["name"]: float(c["value"]) for c in _yaml("finetune.yaml")["finetune_memory"]}


def _prices() -> dict[str, float]:
    return {
        size: float(p["usd_per_hour"])
        for fam in _yaml("ec2.yaml")["instance_families"]
        for size, p in (fam.get("prices") or {}).items()
    }


def test_qlora_constants_are_the_papers() -> None:
    # QLoRA (arXiv:2305.14314) section 3: one fp32 constant per 64 weights is 32/64 = 0.5 bits;
    # double quantization stores them in 8 bits with one fp32 per 256: 8/64 + 32/(64*256) = 0.127.
    c = _constants()
    assert c["quant_constant_bits"] == 32 / 64
    assert c["double_quant_constant_bits"] == 8 / 64 + 32 / (64 * 256)
    assert round(c["double_quant_constant_bits"], 3) == 0.127
    assert c["nf4_bits_per_weight"] == 4
    assert c["default_lora_rank"] == 64  # the paper's r on all linear layers (appendix B)


def test_qlora_estimate_is_composed_of_the_data_terms() -> None:
    c = _constants()
    p, rank = 8e9, 64
    est = g.estimate(g.ModelSpec(params=p, mode="qlora"))
    layers, hidden = est.shape.layers, est.shape.hidden
    adapters = layers * 18 * rank * hidden  # q,k,v,o (2 x hidden each) + MLP h x 4h pair (5 each)
    tokens = 2048
    b = est.breakdown
    assert b["weights"] == pytest.approx(p * (4 + 8 / 64 + 32 / 16384) / 8 / GIB)
    assert b["adapter_weights"] == pytest.approx(adapters * c["adapter_weight_bytes"] / GIB)
    assert b["adapter_gradients"] == pytest.approx(adapters * 4 / GIB)
    assert b["optimizer_states"] == pytest.approx(adapters * 2 * 4 / GIB)  # Adam: two fp32 moments
    assert b["dequantized_weight"] == pytest.approx(4 * hidden**2 * 2 / GIB)
    # checkpointed (QLoRA's setup): each layer's 16-bit input, plus one layer's 34 x s x h rebuilt
    assert b["activations"] == pytest.approx((layers * 2 * tokens * hidden + 34 * tokens * hidden) / GIB)
    assert "gradients" not in b and "master_weights" not in b  # the base is frozen
    rest = sum(v for k, v in b.items() if k != "runtime_overhead")
    assert b["runtime_overhead"] == pytest.approx(1 + 0.1 * rest)
    assert {x.name for x in est.constants} >= {"double_quant_constant_bits", "default_lora_rank"}


def test_qlora_65b_weights_and_adapters_fit_the_papers_48_gb_gpu() -> None:
    # QLoRA abstract: a 65B model fine-tuned on a single 48 GB GPU. The parameter-bound terms
    # (4-bit base, r=64 adapters, their gradients and Adam states) stay under 48 GB.
    est = g.estimate(g.ModelSpec(params=65e9, mode="qlora", seq_len=512))
    assert 30 * GB < est.static_gib * GIB < 48 * GB
    assert est.breakdown["weights"] * GIB == pytest.approx(65e9 * 4.127 / 8, rel=1e-3)


def test_lora_175b_matches_the_lora_papers_350_gb() -> None:
    # LoRA (arXiv:2106.09685) section 4.2: GPT-3 175B with r=4 needs 350 GB instead of 1.2 TB:
    # the fp16 base, no optimizer state for it. Adapters on every linear layer add ~1 GB here.
    est = g.estimate(g.ModelSpec(params=175e9, mode="lora", precision="fp16", lora_rank=4))
    assert est.breakdown["weights"] * GIB == pytest.approx(350 * GB)
    assert est.static_gib * GIB == pytest.approx(350 * GB, rel=0.01)
    full = g.estimate(g.ModelSpec(params=175e9, mode="train", precision="fp16"))
    assert full.static_gib > 3 * est.static_gib  # "reduce VRAM by up to 2/3"


def test_lora_checkpointing_flag_and_default() -> None:
    off = g.estimate(g.ModelSpec(params=8e9, mode="lora"))
    on = g.estimate(g.ModelSpec(params=8e9, mode="lora", checkpointing=True))
    layers, hidden, tokens = off.shape.layers, off.shape.hidden, 2048
    assert off.breakdown["activations"] == pytest.approx(layers * 34 * tokens * hidden / GIB)
    assert on.breakdown["activations"] == pytest.approx((layers * 2 + 34) * tokens * hidden / GIB)
    assert off.breakdown["weights"] == pytest.approx(8e9 * 2 / GIB)  # the bf16 base, frozen


def test_8b_inference_ranks_g6_and_g5_by_their_data_prices() -> None:
    k = load()
    prices = _prices()
    est = g.estimate(g.ModelSpec(params=8e9))
    recs, _ = g.recommend(est, k.gpus, k.instance_types)
    by_type = {r.instance_type: r for r in recs}
    assert by_type["g6.xlarge"].usd_per_hour == prices["g6.xlarge"] == 0.8048
    assert by_type["g5.xlarge"].usd_per_hour == prices["g5.xlarge"] == 1.006
    priced = [r for r in recs if r.price_status == "priced"]
    assert [r.usd_per_hour for r in priced] == sorted(prices[r.instance_type or ""] for r in priced)
    assert priced[0].instance_type == min(
        (r.instance_type or "" for r in priced), key=lambda t: prices[t]
    )  # the cheapest family's cheapest size leads
    unpriced = {r.instance_type for r in recs if r.price_status == "unpriced"}
    assert unpriced == {"p5e.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"}  # listed, not dropped
    assert all(r.price_status == "no_instance_type" for r in recs if r.instance_type is None)


def test_split_caveats_follow_the_interconnect_data() -> None:
    k = load()
    families = {f["family"]: f for f in _yaml("ec2.yaml")["instance_families"]}
    est = g.estimate(g.ModelSpec(params=20e9))  # ~45 GiB: 2 x A100-40GB, 3 x A10G
    recs, _ = g.recommend(est, k.gpus, k.instance_types)
    for r in recs:
        if r.instance_type is None or r.count == 1:
            assert r.caveat is None or r.instance_type is None
            continue
        it = k.instance_type(r.instance_type)
        kind = families[it.family]["interconnect"]["kind"]
        assert r.interconnect == kind
        if r.instances > 1:
            assert "tensor parallelism across instances is slow" in (r.caveat or "")
            assert ("EFA" in (r.link or "")) == bool(families[it.family]["efa"].get(it.name, False))
        else:
            assert {"nvswitch": "NVSwitch", "pcie": "PCIe", "nvlink": "NVLink"}[kind] in (r.caveat or "")
    p4d = next(r for r in recs if r.instance_type == "p4d.24xlarge")
    assert (p4d.count, p4d.instances, p4d.link) == (2, 1, "NVSwitch")


def test_every_family_says_how_its_gpus_are_linked() -> None:
    for fam in _yaml("ec2.yaml")["instance_families"]:
        ic = fam["interconnect"]
        assert ic["kind"] in ("nvswitch", "nvlink", "nvlink-multinode", "pcie"), fam["family"]
        assert ic["source"] and ic["confidence"] in ("high", "medium", "low")
        if any((fam.get("fabric_manager") or {}).values()):  # an NVSwitch baseboard
            assert ic["kind"] == "nvswitch", fam["family"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mode", "qlora", "--precision", "fp32"], "--mode qlora with --precision fp32"),
        (["--mode", "lora", "--precision", "int4"], "--mode lora with --precision int4"),
        (["--mode", "lora", "--lora-rank", "0"], "--lora-rank 0 is not positive"),
        (["--lora-rank", "8"], "--lora-rank with --mode inference"),
        (["--checkpointing"], "--checkpointing with --mode inference"),
    ],
)
def test_finetune_bad_input(args: list[str], needle: str) -> None:
    res = invoke("--params", "7B", *args)
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1
    assert needle in res.stderr


# --- the real CLI, as a user runs it ------------------------------------------------------


def test_cli_8b_ranking_prices_g6_and_g5_and_names_the_unpriced(monkeypatch: pytest.MonkeyPatch) -> None:
    prices = _prices()
    res = provision("advise", "gpu", "--params", "8B", "--json")
    assert res.returncode == 0, res.stderr
    recs = json.loads(res.stdout)["recommendations"]
    priced = [r for r in recs if r["usd_per_hour"] is not None]
    assert {r["instance_type"]: r["usd_per_hour"] for r in priced}["g5.xlarge"] == prices["g5.xlarge"]
    order = [r["instance_type"] for r in priced]
    assert order.index("g6.xlarge") < order.index("g5.xlarge")  # 0.8048 < 1.006 in ec2.yaml
    assert [r["usd_per_hour"] for r in priced] == pytest.approx(sorted(prices[t] for t in order), abs=1e-4)
    monkeypatch.setenv("COLUMNS", "200")  # rich's table rows on one line each
    human = provision("advise", "gpu", "--params", "8B")
    assert human.returncode == 0, human.stderr
    row = next(line for line in human.stdout.splitlines() if "g5.xlarge" in line)
    assert f"{prices['g5.xlarge']:.2f}" in row
    unpriced = next(line for line in human.stdout.splitlines() if line.startswith("unpriced"))
    for name in ("p5e.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"):
        assert name in unpriced
    assert "read 2026-12-01" in human.stdout and "skypilot-catalog" in human.stdout


def test_cli_qlora_shows_how_the_estimate_is_composed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    res = provision("advise", "gpu", "--params", "8B", "--mode", "qlora", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["breakdown"]["weights"] == pytest.approx(8e9 * (4 + 8 / 64 + 32 / 16384) / 8 / GIB, abs=1e-3)
    assert doc["model"]["lora_rank"] == 64 and doc["model"]["mode"] == "qlora"
    assert doc["model"]["adapter_params"] == doc["model"]["layers"] * 18 * 64 * doc["model"]["hidden"]
    assert "NF4" in doc["how"]["weights"]
    dq = next(c for c in doc["constants"] if c["name"] == "double_quant_constant_bits")
    assert "https://arxiv.org/abs/2305.14314" in dq["source"] and dq["confidence"] == "high"
    human = provision("advise", "gpu", "--params", "8B", "--mode", "qlora")
    assert "qlora rank 64" in human.stdout
    assert "arxiv.org/abs/2305.14314" in human.stdout and "(NF4 + double-quantized constants)" in human.stdout


def test_cli_70b_training_names_the_network_between_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    res = provision("advise", "gpu", "--params", "70B", "--mode", "train")
    assert res.returncode == 0, res.stderr
    assert "tensor parallelism across instances is slow" in res.stdout
    assert "GPU link NVSwitch" in res.stdout  # p4de.24xlarge's 8 GPUs, per its ec2.yaml interconnect
