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

- LoRA / QLoRA fine-tuning (``--mode lora|qlora``): the frozen base (no gradients, no optimizer
  state: Hu et al. 2021, arXiv:2106.09685) in the precision, or for QLoRA in 4-bit NF4 plus its
  double-quantized constants (Dettmers et al. 2023, arXiv:2305.14314, section 3); adapters of rank
  r on every linear layer with their gradients and optimizer states; activations (QLoRA with
  gradient checkpointing, as the paper trains). The constants are data with their sources:
  ``matrix/data/finetune.yaml`` (``finetune_memory``).

When a model needs several GPUs, the estimate assumes it is split evenly over them (FSDP / ZeRO-3
for training, tensor or pipeline parallelism for inference), each GPU paying its own context; the
recommendation names how those GPUs are linked (NVLink/NVSwitch inside an instance where the data
says so, the network between instances).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from provision.errors import BadInput
from provision.matrix import load

GIB = 1024**3
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Mode = Literal["inference", "train", "lora", "qlora"]
Optimizer = Literal["adam", "sgd"]

PRECISIONS: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
LORA_PRECISIONS = ("fp32", "bf16", "fp16")  # the frozen base's dtype
QLORA_PRECISIONS = ("bf16", "fp16")  # the compute dtype the 4-bit weights are dequantized to
FINETUNE = ("lora", "qlora")
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
    lora_rank: int | None = None  # None: finetune.yaml's default_lora_rank
    checkpointing: bool | None = None  # None: the mode's default (QLoRA on, else off)

    def validate(self) -> None:
        if self.mode == "lora" and self.precision not in LORA_PRECISIONS:
            raise BadInput(
                f"--mode lora with --precision {self.precision}: LoRA keeps the frozen base in fp32, bf16 or fp16",
                "for a 4-bit base use --mode qlora; for an int8 base no estimate is made",
            )
        if self.mode == "qlora" and self.precision not in QLORA_PRECISIONS:
            raise BadInput(
                f"--mode qlora with --precision {self.precision}: QLoRA keeps a 4-bit NF4 base, computing in bf16/fp16",
                "give --precision bf16 (or fp16 on GPUs without bf16): it names the compute dtype",
            )
        if self.lora_rank is not None and self.mode not in FINETUNE:
            raise BadInput(f"--lora-rank with --mode {self.mode}", "--lora-rank applies to --mode lora and qlora")
        if self.lora_rank is not None and self.lora_rank < 1:
            raise BadInput(f"--lora-rank {self.lora_rank} is not positive", "give the adapter rank, e.g. 8, 16 or 64")
        if self.checkpointing and self.mode == "inference":
            raise BadInput(
                "--checkpointing with --mode inference", "activation checkpointing applies to training modes"
            )
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
    how: dict[str, str] = field(default_factory=dict)  # per term: the arithmetic behind it
    constants: list[Any] = field(default_factory=list)  # the finetune.yaml constants used (matrix Constant)
    adapter_params: float = 0.0

    @property
    def memory_gib(self) -> float:
        return sum(self.breakdown.values())

    @property
    def static_gib(self) -> float:
        """Weights, gradients, master weights, adapters and optimizer states: what scales with parameters."""
        keys = ("weights", "gradients", "master_weights", "adapter_weights", "adapter_gradients", "optimizer_states")
        return sum(self.breakdown.get(k, 0.0) for k in keys)

    def per_gpu_gib(self, count: int) -> float:
        """Memory on each of ``count`` GPUs when the model is split evenly over them."""
        shared = self.memory_gib - CONTEXT_GIB
        return shared / count + CONTEXT_GIB


def estimate(spec: ModelSpec, constants: Mapping[str, Any] | None = None) -> Estimate:
    """The memory estimate of ``spec``; ``constants``: finetune.yaml's (default: the knowledge's)."""
    spec.validate()
    p = spec.params
    shape = infer_shape(p)
    act_bytes = 4 if spec.precision == "fp32" else 2
    tokens = spec.batch * spec.seq_len
    b: dict[str, float] = {}
    how: dict[str, str] = {}
    notes = [
        f"estimate for a decoder-only transformer of ~{shape.layers} layers x {shape.hidden} hidden "
        f"(inferred from the parameter count), batch {spec.batch}, sequence {spec.seq_len}"
    ]
    est = Estimate(spec, shape, b, notes, how)
    if spec.mode in FINETUNE:
        _finetune_terms(est, _constants(constants), tokens, act_bytes)
    else:
        b["weights"] = p * PRECISIONS[spec.precision] / GIB
        how["weights"] = f"{human_params(p)} x {PRECISIONS[spec.precision]:g} bytes ({spec.precision})"
    if spec.mode == "train":
        grad_bytes = 4 if spec.precision == "fp32" else 2  # fp8 recipes keep bf16 gradients
        b["gradients"] = p * grad_bytes / GIB
        how["gradients"] = f"{human_params(p)} x {grad_bytes} bytes"
        if spec.precision != "fp32":
            b["master_weights"] = p * 4 / GIB
            how["master_weights"] = f"{human_params(p)} x 4 bytes (fp32 copy)"
        b["optimizer_states"] = p * 4 * OPTIMIZER_STATES[spec.optimizer] / GIB
        how["optimizer_states"] = f"{human_params(p)} x {OPTIMIZER_STATES[spec.optimizer]} x 4 bytes ({spec.optimizer})"
        _activations(est, tokens, act_bytes, bool(spec.checkpointing))
        if spec.optimizer == "sgd":
            notes.append("SGD with momentum (one fp32 state per parameter)")
    elif spec.mode == "inference":
        kv = 2 * shape.layers * shape.hidden * tokens * act_bytes
        transient = ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN * tokens * shape.hidden * act_bytes / 2
        b["kv_cache"] = kv / GIB
        how["kv_cache"] = f"2 x {shape.layers} layers x {shape.hidden} x {tokens} tokens x {act_bytes} bytes"
        b["activations"] = transient / GIB
        how["activations"] = f"one layer: {_ACT} bytes x {tokens} tokens x {shape.hidden}{_FP32[act_bytes]}"
        notes.append("KV cache for multi-head attention; grouped-query attention needs less")
    rest = sum(b.values())
    b["runtime_overhead"] = CONTEXT_GIB + FRAGMENTATION * rest
    how["runtime_overhead"] = f"{CONTEXT_GIB:g} GiB CUDA context + {FRAGMENTATION:.0%} of the rest (allocator)"
    return est


def _constants(given: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if given is not None:
        return given

    return load().t.finetune_memory


_ACT = ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN  # its short name in the arithmetic texts
_FP32 = {2: "", 4: ", x 2 in fp32"}  # Korthikanti's byte counts are for 16-bit activations


def _activations(est: Estimate, tokens: int, act_bytes: int, checkpointing: bool, kept_bytes: float = 2.0) -> None:
    """Training activations (Korthikanti et al. 2022): every layer's, or with full checkpointing
    each layer's input (``kept_bytes`` per token and hidden unit) plus one layer rebuilt at a time."""
    shape = est.shape
    per_layer = ACTIVATION_BYTES_PER_LAYER_TOKEN_HIDDEN * tokens * shape.hidden * act_bytes / 2
    if checkpointing:
        kept = shape.layers * kept_bytes * tokens * shape.hidden * act_bytes / 2
        est.breakdown["activations"] = (kept + per_layer) / GIB
        est.how["activations"] = (
            f"checkpointed: {shape.layers} layers x {kept_bytes:g} bytes x {tokens} tokens x {shape.hidden}"
            f" (layer inputs) + one layer's {_ACT} bytes x {tokens} x {shape.hidden} rebuilt{_FP32[act_bytes]}"
        )
        est.notes.append("activation checkpointing on: each layer's input kept, one layer recomputed at a time")
    else:
        est.breakdown["activations"] = shape.layers * per_layer / GIB
        est.how["activations"] = (
            f"{shape.layers} layers x {_ACT} bytes x {tokens} tokens x {shape.hidden}{_FP32[act_bytes]}"
        )
        est.notes.append("activations without checkpointing; checkpointing trades them for ~30% more compute")


def _finetune_terms(est: Estimate, c: Mapping[str, Any], tokens: int, act_bytes: int) -> None:
    """LoRA / QLoRA: a frozen base, adapters on every linear layer, their gradients and states."""
    spec, shape, b, how = est.spec, est.shape, est.breakdown, est.how
    used: list[str] = []

    def k(name: str) -> float:
        used.append(name)
        return float(c[name].value)

    p = spec.params
    rank = spec.lora_rank if spec.lora_rank is not None else int(k("default_lora_rank"))
    dims = k("adapter_dims_per_layer")
    adapters = shape.layers * dims * rank * shape.hidden
    est.adapter_params = adapters
    if spec.mode == "qlora":
        nf4, dq = k("nf4_bits_per_weight"), k("double_quant_constant_bits")
        b["weights"] = p * (nf4 + dq) / 8 / GIB
        how["weights"] = f"{human_params(p)} x ({nf4:g} + {dq:.3f}) bits (NF4 + double-quantized constants) / 8"
        plain = k("quant_constant_bits")
        est.notes.append(
            f"base frozen in 4-bit NF4 with double quantization; without it the constants take {plain:g} bits/parameter"
            f" (+{p * (plain - dq) / 8 / GIB:.2f} GiB)"
        )
        buf = k("dequantized_matrix_hidden_squared") * shape.hidden**2 * act_bytes
        b["dequantized_weight"] = buf / GIB
        how["dequantized_weight"] = f"{k('dequantized_matrix_hidden_squared'):g} x {shape.hidden}^2 x {act_bytes} bytes"
    else:
        b["weights"] = p * PRECISIONS[spec.precision] / GIB
        how["weights"] = f"{human_params(p)} x {PRECISIONS[spec.precision]:g} bytes ({spec.precision}, frozen)"
    w, g, s = k("adapter_weight_bytes"), k("adapter_gradient_bytes"), k("optimizer_state_bytes")
    states = OPTIMIZER_STATES[spec.optimizer]
    n = f"{human_params(adapters)} adapter parameters"
    b["adapter_weights"] = adapters * w / GIB
    how["adapter_weights"] = f"{n} ({shape.layers} layers x {dims:g} x rank {rank} x {shape.hidden}) x {w:g} bytes"
    b["adapter_gradients"] = adapters * g / GIB
    how["adapter_gradients"] = f"{n} x {g:g} bytes"
    b["optimizer_states"] = adapters * s * states / GIB
    how["optimizer_states"] = f"{n} x {states} x {s:g} bytes ({spec.optimizer})"
    ckpt = spec.checkpointing
    if ckpt is None:
        ckpt = spec.mode == "qlora" and bool(k("qlora_checkpointing"))
    kept = k("checkpoint_bytes_per_token_hidden") if ckpt else 2.0
    _activations(est, tokens, act_bytes, ckpt, kept)
    est.notes.append(
        f"adapters of rank {rank} on every linear layer ({adapters / p:.2%} of the parameters); the base has no"
        " gradients and no optimizer state"
    )
    if spec.mode == "qlora":
        est.notes.append(
            "a paged optimizer (bitsandbytes) moves its states to CPU RAM on spikes; counted on the GPU here"
        )
    est.constants = [c[name] for name in dict.fromkeys(used)]


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
    link: str | None = None  # how the `count` GPUs talk: None for one GPU
    caveat: str | None = None  # what the split costs, where the model is split
    interconnect: str | None = None  # ec2.yaml's kind inside one instance (None: not in the data)
    efa: bool | None = None  # the size has EFA (None: no EC2 type)

    @property
    def price_status(self) -> str:
        if self.instance_type is None:
            return "no_instance_type"
        return "unpriced" if self.usd_per_hour is None else "priced"

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
            "price_status": self.price_status,
            "link": self.link,
            "caveat": self.caveat,
            "interconnect": self.interconnect,
            "efa": self.efa,
        }


NETWORK_CAVEAT = (
    "between instances only the network (EFA where the size has it): tensor parallelism across instances"
    " is slow; keep it inside one instance and use pipeline parallelism or FSDP across them"
)
_KIND = {
    "nvswitch": (
        "NVSwitch",
        "NVLink through NVSwitch: every GPU pair at full NVLink speed, tensor parallelism is fine",
    ),
    "nvlink": (
        "NVLink",
        "NVLink without a switch (not every pair linked directly): tensor parallelism works, less evenly",
    ),
    "nvlink-multinode": ("NVLink domain", "one NVLink domain across the UltraServer's instances"),
    "pcie": ("PCIe", "no NVLink: the GPUs exchange activations over PCIe; prefer pipeline parallelism or FSDP"),
}


def kind_text(kind: str) -> tuple[str, str]:
    """(short name, what it means for a split) of an ec2.yaml interconnect kind."""
    return _KIND.get(kind, (kind, kind))


def split_caveat(count: int, instances: int, it: Any | None) -> tuple[str | None, str | None]:
    """(short link name, caveat) for ``count`` GPUs on ``instances`` of ``it`` (a matrix
    InstanceType, or None for a GPU no EC2 type in the knowledge carries)."""
    if count <= 1:
        return None, None
    if it is None:
        return "machine", (
            f"{count} GPUs in one machine: tensor parallelism is fast only over NVLink/NVSwitch; "
            "over PCIe prefer pipeline parallelism or FSDP"
        )
    ic = it.interconnect
    inside_short, inside = kind_text(ic.kind) if ic else ("?", "interconnect not in the knowledge")
    if instances == 1:
        return inside_short, f"{count} GPUs inside one {it.name}: {inside}"
    if ic is not None and ic.kind == "nvlink-multinode":
        return f"{inside_short} x{instances}", f"{instances} x {it.name} of one UltraServer: {inside}"
    net = "EFA" if it.efa else "network (no EFA)"
    short = f"{'EFA' if it.efa else 'net'} x{instances}"
    caveat = f"{instances} x {it.name}: {NETWORK_CAVEAT} (this size: {net})"
    if it.gpu_count == 1:  # one GPU per instance: nothing is linked inside one
        return short, caveat
    return f"{inside_short} + {short}", f"{caveat}; inside each: {inside}"


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
            link, caveat = split_caveat(n, instances, it)
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
                link=link,
                caveat=caveat,
                interconnect=it.interconnect.kind if it.interconnect else None,
                efa=it.efa,
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
        link, caveat = split_caveat(n, 1, None)
        out.append(
            Recommendation(g.name, g.memory_gib, n, est.per_gpu_gib(n), None, 1, n, None, None, (), link, caveat)
        )
    out.sort(key=Recommendation.sort_key)
    return out, excluded


def to_json(
    est: Estimate,
    recs: list[Recommendation],
    excluded: list[dict[str, str]],
    sources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON answer; ``sources`` (the knowledge's, by id) turn the cited ids into URLs."""
    s = est.spec
    urls = {k: v.url for k, v in (sources or {}).items()}
    priced = [r for r in recs if r.usd_per_hour is not None]
    reads = sorted({r.price_read for r in priced if r.price_read})
    price_sources = sorted({x for r in priced for x in r.price_source})
    return {
        "ok": True,
        "memory_gib": round(est.memory_gib, 2),
        "estimate": True,
        "breakdown": {k: round(v, 3) for k, v in est.breakdown.items()},
        "how": dict(est.how),
        "constants": [
            {
                "name": c.name,
                "value": c.value,
                "what": c.what,
                "source": [urls.get(x, x) for x in c.source],
                "confidence": c.confidence,
            }
            for c in est.constants
        ],
        "assumptions": {
            "prices": "Linux on-demand USD per hour in us-east-1 for all instances of a row, from the knowledge",
            "price_read": reads,
            "price_source": [urls.get(x, x) for x in price_sources],
            "split": "evenly over the GPUs (FSDP/ZeRO-3 for training, tensor or pipeline parallelism for inference)",
            "one_row_per_family": "each EC2 family's size that gives the needed GPUs most cheaply",
        },
        "model": {
            "params": s.params,
            "precision": s.precision,
            "mode": s.mode,
            "optimizer": s.optimizer if s.mode != "inference" else None,
            "batch": s.batch,
            "seq_len": s.seq_len,
            "lora_rank": _rank(est),
            "adapter_params": round(est.adapter_params) if s.mode in FINETUNE else None,
            "layers": est.shape.layers,
            "hidden": est.shape.hidden,
        },
        "notes": est.notes,
        "recommendations": [r.to_json() for r in recs],
        "excluded": excluded,
    }


def _rank(est: Estimate) -> int | None:
    """The adapter rank used (given, or finetune.yaml's default); None outside LoRA/QLoRA."""
    if est.spec.mode not in FINETUNE:
        return None
    if est.spec.lora_rank is not None:
        return est.spec.lora_rank
    return next(int(c.value) for c in est.constants if c.name == "default_lora_rank")
