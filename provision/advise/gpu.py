"""How much GPU memory a transformer model needs, and which GPUs and EC2 instance types hold it.

An estimate from the parameter count alone, stated as such in every output. The terms and where
each comes from:

- weights: parameters x bytes per parameter of the precision (fp32 4, bf16/fp16 2, fp8/int8 1,
  int4 0.5).
- training (mixed precision, the usual recipe): gradients in the compute precision, an fp32 master
  copy of the weights, and the optimizer states in fp32 -- Adam keeps two (momentum and variance),
  SGD with momentum one. Mixed-precision Adam is thus 2 + 2 + 4 + 8 = 16 bytes per parameter, the
  figure of the ZeRO paper (Rajbhandari et al. 2019, arXiv:1910.02054, section 3.1: "2Ψ + 2Ψ +
  KΨ" with K = 12). fp32 training keeps no master copy: 4 + 4 + 8 = 16 as well.
- the model's shape, which activations depend on, is inferred: parameters ~= 12 x layers x
  hidden^2 (Kaplan et al. 2020, arXiv:2001.08361, section 2.1) with hidden ~= 128 x layers, the
  ratio of the LLaMA family (7B: 32 x 4096, 13B: 40 x 5120, 65B: 80 x 8192; Touvron et al. 2023,
  arXiv:2302.13971, table 2).
- training activations: 34 x seq x batch x hidden bytes per layer in 16-bit (Korthikanti et al.
  2022, arXiv:2205.05198, equation 1, without its 5as/h attention-score term, which fused /
  flash attention does not store), no activation checkpointing; doubled in fp32.
- inference: the KV cache, 2 x layers x hidden x seq x batch values in 16-bit (fp32 for fp32),
  for multi-head attention (a model with grouped-query attention needs less: an upper estimate),
  plus one layer's transient activations.
- runtime overhead: 1 GiB per GPU for the CUDA context and libraries' workspaces, plus 10% of the
  rest for allocator caching and fragmentation.

When a model needs several GPUs, the estimate assumes it is split evenly over them (FSDP / ZeRO-3
for training, tensor or pipeline parallelism for inference), each GPU paying its own context.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from provision.errors import BadInput

GIB = 1024**3
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Mode = Literal["inference", "train"]
Optimizer = Literal["adam", "sgd"]

PRECISIONS: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
OPTIMIZER_STATES = {"adam": 2, "sgd": 1}  # fp32 tensors per parameter (SGD: with momentum)
HIDDEN_PER_LAYER = 128
ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN = 34  # Korthikanti et al., 16-bit, flash attention
CONTEXT_GIB = 1.0
FRAGMENTATION = 0.10
MAX_GPUS_PER_NODE = 8
MAX_INSTANCES = 8
MAX_PARAMS = 1e14  # 100T: far past any model; a typo of the exponent beyond it
# The oldest compute capability with native support for the format (CUDA C++ Programming Guide,
# "Arithmetic Instructions"; bf16 from Ampere 8.0, fp8 from Ada 8.9 / Hopper 9.0).
MIN_CC = {"bf16": (8, 0), "fp8": (8, 9)}

_PARAMS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def human_params(n: float) -> str:
    """7e9 -> ``7B``, 1.3e8 -> ``130M``: the way model sizes are usually written."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:g}"


def parse_params(text: str) -> float:
    """``7e9``, ``7B``, ``70b``, ``350M``, ``1.5T``, ``7000000000`` -> a parameter count."""
    m = _PARAMS.match(text.replace("_", "").replace(",", ""))
    if not m:
        raise BadInput(f"--params `{text}` is not a parameter count", "give e.g. 7e9, 7B, 70b or 350M")
    value = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not 1e3 <= value <= MAX_PARAMS:
        raise BadInput(f"--params `{text}` is {value:g} parameters", "give the model's parameter count, e.g. 7B")
    return value


@dataclass(frozen=True)
class ModelSpec:
    params: float
    precision: Precision = "bf16"
    mode: Mode = "inference"
    optimizer: Optimizer = "adam"
    batch: int = 1
    seq_len: int = 2048

    def validate(self) -> None:
        if self.mode == "train" and self.precision not in TRAIN_PRECISIONS:
            raise BadInput(
                f"--mode train with --precision {self.precision}: full training does not keep {self.precision} weights",
                "train in bf16, fp16, fp8 or fp32; quantized fine-tuning such as QLoRA is outside this estimate",
            )
        if self.batch < 1:
            raise BadInput(f"--batch {self.batch} is not positive", "give a batch size >= 1")
        if self.seq_len < 1:
            raise BadInput(f"--seq-len {self.seq_len} is not positive", "give a sequence length >= 1")


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int


def infer_shape(params: float) -> Shape:
    """Layers and hidden size of a decoder-only transformer with ``params`` parameters."""
    layers = max(1, round((params / (12 * HIDDEN_PER_LAYER**2)) ** (1 / 3)))
    hidden = max(HIDDEN_PER_LAYER, round(math.sqrt(params / (12 * layers))))
    return Shape(layers, hidden)


@dataclass
class Estimate:
    spec: ModelSpec
    shape: Shape
    breakdown: dict[str, float]  # GiB per term; the overhead assumes one GPU
    notes: list[str] = field(default_factory=list)

    @property
    def memory_gib(self) -> float:
        return sum(self.breakdown.values())

    @property
    def static_gib(self) -> float:
        """Weights, gradients, master weights and optimizer states: what scales with parameters."""
        keys = ("weights", "gradients", "master_weights", "optimizer_states")
        return sum(self.breakdown.get(k, 0.0) for k in keys)

    def per_gpu_gib(self, count: int) -> float:
        """Memory on each of ``count`` GPUs when the model is split evenly over them."""
        shared = self.memory_gib - CONTEXT_GIB
        return shared / count + CONTEXT_GIB


def estimate(spec: ModelSpec) -> Estimate:
    spec.validate()
    p = spec.params
    shape = infer_shape(p)
    act_bytes = 4 if spec.precision == "fp32" else 2
    tokens = spec.batch * spec.seq_len
    b: dict[str, float] = {"weights": p * PRECISIONS[spec.precision] / GIB}
    notes = [
        f"estimate for a decoder-only transformer of ~{shape.layers} layers x {shape.hidden} hidden "
        f"(inferred from the parameter count), batch {spec.batch}, sequence {spec.seq_len}"
    ]
    if spec.mode == "train":
        grad_bytes = 4 if spec.precision == "fp32" else 2  # fp8 recipes keep bf16 gradients
        b["gradients"] = p * grad_bytes / GIB
        if spec.precision != "fp32":
            b["master_weights"] = p * 4 / GIB
        b["optimizer_states"] = p * 4 * OPTIMIZER_STATES[spec.optimizer] / GIB
        per_layer = ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN * tokens * shape.hidden * act_bytes / 2
        b["activations"] = shape.layers * per_layer / GIB
        notes.append("activations without checkpointing; checkpointing trades them for ~30% more compute")
        if spec.optimizer == "sgd":
            notes.append("SGD with momentum (one fp32 state per parameter)")
    else:
        kv = 2 * shape.layers * shape.hidden * tokens * act_bytes
        transient = ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN * tokens * shape.hidden * act_bytes / 2
        b["kv_cache"] = kv / GIB
        b["activations"] = transient / GIB
        notes.append("KV cache for multi-head attention; grouped-query attention needs less")
    rest = sum(b.values())
    b["runtime_overhead"] = CONTEXT_GIB + FRAGMENTATION * rest
    return Estimate(spec, shape, b, notes)


def gpus_needed(est: Estimate, gpu_memory_gib: float, limit: int) -> int | None:
    """The fewest GPUs of this size that hold the model split evenly, or None above ``limit``."""
    for n in range(1, limit + 1):
        if est.per_gpu_gib(n) <= gpu_memory_gib:
            return n
    return None


@dataclass(frozen=True)
class Recommendation:
    gpu: str
    gpu_memory_gib: float
    count: int  # GPUs needed
    per_gpu_gib: float
    instance_type: str | None  # None: no EC2 type in the knowledge carries this GPU
    instances: int
    gpus_provisioned: int
    usd_per_hour: float | None  # for all `instances`; None where the data has no price
    price_read: str | None
    price_source: tuple[str, ...]

    def sort_key(self) -> tuple[bool, float, int, float, str]:
        # Cheapest first; unpriced after: fewest machines, then least memory provisioned (least
        # waste) first.
        return (
            self.usd_per_hour is None,
            self.usd_per_hour or 0.0,
            self.instances,
            self.gpus_provisioned * self.gpu_memory_gib,
            self.instance_type or self.gpu,
        )

    def size_key(self) -> tuple[bool, float, int, int]:
        # Within one EC2 family: cheapest, then fewest machines (a model split over machines
        # pays for the network between them), then fewest GPUs.
        return (self.usd_per_hour is None, self.usd_per_hour or 0.0, self.instances, self.gpus_provisioned)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "count": self.count,
            "gpu_memory_gib": self.gpu_memory_gib,
            "per_gpu_gib": round(self.per_gpu_gib, 2),
            "instance_type": self.instance_type,
            "instances": self.instances,
            "gpus_provisioned": self.gpus_provisioned,
            "usd_per_hour": None if self.usd_per_hour is None else round(self.usd_per_hour, 4),
            "price_read": self.price_read,
            "price_source": list(self.price_source),
        }


def _supports(cc: tuple[int, int], precision: str) -> bool:
    need = MIN_CC.get(precision)
    return need is None or cc >= need


def recommend(
    est: Estimate, gpus: Iterable[Any], instance_types: Iterable[Any]
) -> tuple[list[Recommendation], list[dict[str, str]]]:
    """Every GPU model and EC2 instance family that holds the model, cheapest first.

    ``gpus`` and ``instance_types`` are the knowledge's records (``matrix.Gpu``,
    ``matrix.InstanceType``). Per EC2 family the size is chosen that gives the needed GPUs most
    cheaply (or, unpriced, with the fewest GPUs, then the first listed). Also returns the GPUs
    left out and why.
    """
    precision = est.spec.precision
    excluded: list[dict[str, str]] = []
    usable: dict[str, Any] = {}
    for g in gpus:
        if not _supports(g.cc, precision):
            excluded.append(
                {"gpu": g.name, "why": f"no native {precision} (compute capability {g.compute_capability})"}
            )
        else:
            usable[g.name] = g
    families: dict[str, list[Any]] = {}
    for it in instance_types:
        families.setdefault(it.family, []).append(it)
    out: list[Recommendation] = []
    offered: set[str] = set()
    for sizes in families.values():
        gpu_mem = sizes[0].gpu_memory_gib
        g = usable.get(sizes[0].gpu.name)
        if g is None:
            continue
        offered.add(g.name)
        n = gpus_needed(est, gpu_mem, MAX_GPUS_PER_NODE * MAX_INSTANCES)
        if n is None:
            continue
        best: Recommendation | None = None
        for it in sizes:
            instances = math.ceil(n / it.gpu_count)
            if instances > MAX_INSTANCES:
                continue
            price = it.price
            rec = Recommendation(
                gpu=g.name,
                gpu_memory_gib=gpu_mem,
                count=n,
                per_gpu_gib=est.per_gpu_gib(n),
                instance_type=it.name,
                instances=instances,
                gpus_provisioned=instances * it.gpu_count,
                usd_per_hour=None if price is None else price.usd_per_hour * instances,
                price_read=None if price is None else price.read,
                price_source=() if price is None else tuple(price.source),
            )
            if best is None or rec.size_key() < best.size_key():
                best = rec
        if best is not None:
            out.append(best)
    for g in usable.values():
        if g.name in offered:
            continue
        n = gpus_needed(est, g.memory_gib, MAX_GPUS_PER_NODE)
        if n is None:
            excluded.append({"gpu": g.name, "why": f"needs more than {MAX_GPUS_PER_NODE} GPUs in one machine"})
            continue
        out.append(Recommendation(g.name, g.memory_gib, n, est.per_gpu_gib(n), None, 1, n, None, None, ()))
    out.sort(key=Recommendation.sort_key)
    return out, excluded


def to_json(est: Estimate, recs: list[Recommendation], excluded: list[dict[str, str]]) -> dict[str, Any]:
    s = est.spec
    return {
        "ok": True,
        "memory_gib": round(est.memory_gib, 2),
        "estimate": True,
        "breakdown": {k: round(v, 3) for k, v in est.breakdown.items()},
        "model": {
            "params": s.params,
            "precision": s.precision,
            "mode": s.mode,
            "optimizer": s.optimizer if s.mode == "train" else None,
            "batch": s.batch,
            "seq_len": s.seq_len,
            "layers": est.shape.layers,
            "hidden": est.shape.hidden,
        },
        "notes": est.notes,
        "recommendations": [r.to_json() for r in recs],
        "excluded": excluded,
    }
