"""`provision advise gpu`: memory estimates against published figures, the GPUs and instance
types that fit (fewest GPUs, cheapest first), and bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from provision.advise import gpu as g
from provision.cli.app import cli
from provision.matrix import load

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
