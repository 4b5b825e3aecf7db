"""The tuning job: measure what makes training fast on this host, and say what to change.

Copied to the target and run there as ``python3 tune_job.py [--allow-cpu] [--scale S]``; it needs
only the standard library and torch (plus nvidia-ml-py for GPU utilization, when installed) and
imports nothing else of ``provision``. It prints one JSON document (schema ``provision.tune/1``)
on stdout and progress lines on stderr.

What it measures, on a small ResNeXt-like CNN and a synthetic image pipeline whose samples cost
CPU time the way real ones do (each is zlib-decompressed from a stored blob, cropped, flipped,
blurred and normalized):

- a batch-size sweep up to the largest batch that fits (or the scale's cap, or the time budget),
  compute only (data already on the device): samples/s, peak memory, GPU utilization; the sweet
  spot is the smallest batch within 5% of the best throughput;
- a DataLoader sweep at that batch: workers from 0 to the CPU count, with and without pinned
  memory, end to end (decode -> copy -> step): samples/s, the share of time the device waited for
  data, GPU utilization;
- mixed precision against fp32, channels_last against contiguous, and a grouped 3x3 convolution
  against a standard one of the same width;
- every run whose utilization is under 70% is flagged with its likely cause.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import threading
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA = "provision.tune/1"
WITHIN = 0.05  # "the smallest batch within 5% of the best throughput"
LOW_UTIL_PCT = 70.0  # the article's threshold: under it, something else is the bottleneck


@dataclass(frozen=True)
class Scale:
    """How big everything is: ``gpu`` on a real GPU, ``cpu`` (under two minutes on a small CPU),
    ``test`` (a few seconds, for the test suite)."""

    name: str
    image: int  # side of the training crop
    source: int  # side of the stored (decoded) image
    width: int  # channels of the network's blocks
    blocks: int
    groups: int  # cardinality of the grouped variant
    blur_passes: int  # CPU work per sample beyond decompressing (augmentation)
    batch_min: int
    batch_max: int
    workers_batch_max: int  # the workers sweep runs at min(sweet spot, this)
    min_steps: int
    min_seconds: float  # each compute measurement runs at least this long
    loader_seconds: float  # each DataLoader measurement
    budget_seconds: float  # the batch sweep stops starting new sizes after this


SCALES = {
    "gpu": Scale("gpu", 128, 144, 128, 4, 32, 2, 16, 16384, 256, 10, 1.0, 1.5, 30.0),
    "cpu": Scale("cpu", 48, 56, 32, 2, 8, 1, 4, 128, 32, 3, 1.0, 3.0, 30.0),
    "test": Scale("test", 24, 28, 16, 1, 4, 1, 2, 8, 4, 2, 0.05, 0.3, 5.0),
}


def log(msg: str) -> None:
    sys.stderr.write(f"tune: {msg}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------
# NVML: GPU utilization sampled in a thread during each measurement


class UtilSampler:
    """Samples NVML's GPU utilization every 50 ms between start() and stop(); mean in percent."""

    def __init__(self, handle: Any, nvml: Any) -> None:
        self._handle = handle
        self._nvml = nvml
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            # a transient NVML error loses one sample, not the run
            with contextlib.suppress(Exception):
                self._samples.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
            self._stop.wait(0.05)

    def start(self) -> None:
        self._samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return round(sum(self._samples) / len(self._samples), 1) if self._samples else None


def nvml_sampler(torch: Any, device: Any) -> tuple[UtilSampler | None, str | None]:
    """A sampler for the GPU torch uses, or None and why (no pynvml, no driver, no GPU)."""
    if device.type != "cuda":
        return None, "no GPU"
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(device)
        bus = getattr(props, "pci_bus_id", None)
        handle = None
        if bus is not None:  # the same GPU as torch's, whatever CUDA_VISIBLE_DEVICES says
            dom = getattr(props, "pci_domain_id", 0)
            dev = getattr(props, "pci_device_id", 0)
            with contextlib.suppress(Exception):
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(f"{dom:08x}:{bus:02x}:{dev:02x}.0")
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        return UtilSampler(handle, pynvml), None
    except Exception as exc:
        return None, f"NVML: {' '.join(str(exc).split())[:200]}"


# --------------------------------------------------------------------------------------------
# The pipeline: a dataset whose samples cost CPU time, and a ResNeXt-like network


def make_blobs(torch: Any, scale: Scale, count: int) -> list[bytes]:
    """``count`` compressed RGB images (smooth patterns plus noise, ~4% smaller compressed)."""
    s = scale.source
    out = []
    for k in range(count):
        g = torch.Generator().manual_seed(k)
        yy = torch.linspace(0, 6.28, s).view(s, 1)
        xx = torch.linspace(0, 6.28, s).view(1, s)
        img = torch.stack([torch.sin(yy * (c + 1 + k)) * torch.cos(xx * (c + 2)) * 100 + 128 for c in range(3)], -1)
        img = img + torch.randint(0, 24, img.shape, generator=g)
        raw = bytes(img.clamp(0, 255).to(torch.uint8).flatten().tolist())
        out.append(zlib.compress(raw, 6))
    return out


def make_dataset(torch: Any, scale: Scale, length: int, classes: int = 10) -> Any:
    """A map-style dataset of ``length`` samples decoded and augmented on every access."""
    blobs = make_blobs(torch, scale, 16)
    kernel = torch.ones(3, 1, 3, 3) / 9.0
    mean, std = 0.45, 0.25

    class Decoded(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return length

        def __getitem__(self, index: int) -> tuple[Any, int]:
            src, crop = scale.source, scale.image
            raw = zlib.decompress(blobs[index % len(blobs)])  # "decode"
            x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(src, src, 3).permute(2, 0, 1)
            dy, dx = (index * 7) % (src - crop + 1), (index * 13) % (src - crop + 1)  # random crop
            x = x[:, dy : dy + crop, dx : dx + crop].float().div_(255.0)
            if index % 2:  # horizontal flip
                x = x.flip(-1)
            for _ in range(scale.blur_passes):  # blur augmentation: the per-sample CPU cost
                x = torch.nn.functional.conv2d(x.unsqueeze(0), kernel, padding=1, groups=3).squeeze(0)
            x = x * (0.9 + 0.2 * ((index * 31) % 11) / 10)  # brightness jitter
            return (x - mean) / std, index % classes

    return Decoded()


def make_model(torch: Any, scale: Scale, groups: int, classes: int = 10) -> Any:
    """Stem, ``blocks`` bottleneck blocks (1x1 -> 3x3 with ``groups`` -> 1x1, residual), head."""
    nn = torch.nn
    w = scale.width

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(w, w, 1, bias=False),
                nn.BatchNorm2d(w),
                nn.ReLU(inplace=True),
                nn.Conv2d(w, w, 3, padding=1, groups=groups, bias=False),
                nn.BatchNorm2d(w),
                nn.ReLU(inplace=True),
                nn.Conv2d(w, w, 1, bias=False),
                nn.BatchNorm2d(w),
            )

        def forward(self, x: Any) -> Any:
            return torch.relu(x + self.body(x))

    return nn.Sequential(
        nn.Conv2d(3, w, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(inplace=True),
        *[Block() for _ in range(scale.blocks)],
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(w, classes),
    )


@dataclass
class Variant:
    amp: bool = False
    channels_last: bool = False
    groups: int = 1


class Trainer:
    """One model, optimizer and precision; ``step`` runs forward, backward and the update."""

    def __init__(self, torch: Any, device: Any, scale: Scale, v: Variant) -> None:
        self.torch = torch
        self.device = device
        torch.manual_seed(0)
        self.model = make_model(torch, scale, v.groups).to(device)
        self.memory_format = torch.channels_last if v.channels_last else torch.contiguous_format
        self.model = self.model.to(memory_format=self.memory_format)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss()
        self.amp = v.amp
        self.amp_dtype = amp_dtype(torch, device)
        # fp16 needs loss scaling against underflowing gradients; bf16 has fp32's range.
        use_scaler = v.amp and self.amp_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)

    def params(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters()))

    def step(self, x: Any, y: Any) -> Any:
        torch = self.torch
        x = x.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
        y = y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp):
            loss = self.loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss


def amp_dtype(torch: Any, device: Any) -> Any:
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16  # CPU autocast supports bf16


def sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(torch: Any, exc: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (bool(oom) and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


# --------------------------------------------------------------------------------------------
# Measurements


class Bench:
    def __init__(self, torch: Any, device: Any, scale: Scale, sampler: UtilSampler | None) -> None:
        self.torch = torch
        self.device = device
        self.scale = scale
        self.sampler = sampler

    def compute(self, batch: int, v: Variant) -> dict[str, Any]:
        """Samples/s of training steps on a batch already on the device (no input pipeline)."""
        torch, device, s = self.torch, self.device, self.scale
        trainer = Trainer(torch, device, s, v)
        x = torch.randn(batch, 3, s.image, s.image, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(2):  # warm-up: cuDNN autotuning, allocator growth, lazy init
            trainer.step(x, y)
        sync(torch, device)
        if self.sampler:
            self.sampler.start()
        steps, started = 0, time.perf_counter()
        while steps < s.min_steps or time.perf_counter() - started < s.min_seconds:
            trainer.step(x, y)
            steps += 1
            if steps % 5 == 0:
                sync(torch, device)
        sync(torch, device)
        elapsed = time.perf_counter() - started
        util = self.sampler.stop() if self.sampler else None
        memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        return {
            "batch_size": batch,
            "samples_per_s": round(steps * batch / elapsed, 1),
            "memory_gib": None if memory is None else round(memory, 3),
            "gpu_util_pct": util,
            "steps": steps,
            "params": trainer.params(),
        }

    def loader(self, batch: int, workers: int, pin: bool, v: Variant) -> dict[str, Any]:
        """Samples/s end to end through a DataLoader; the share of time spent waiting for data."""
        torch, device, s = self.torch, self.device, self.scale
        trainer = Trainer(torch, device, s, v)
        dataset = make_dataset(torch, s, length=batch * 10_000)
        dl = torch.utils.data.DataLoader(
            dataset,
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            pin_memory=pin,
            drop_last=True,
            persistent_workers=False,
        )
        it = iter(dl)
        # Warm-up: the workers start together and fill the prefetch queue; taking one batch per
        # worker first keeps their start-up and that head start out of the steady-state figure.
        for _ in range(max(1, workers)):
            trainer.step(*next(it))
        sync(torch, device)
        if self.sampler:
            self.sampler.start()
        waited = computed = 0.0
        steps, started = 0, time.perf_counter()
        while steps < 3 or time.perf_counter() - started < s.loader_seconds:
            t0 = time.perf_counter()
            xb, yb = next(it)
            t1 = time.perf_counter()
            loss = trainer.step(xb, yb)
            loss.item()  # a real loop reads the loss; it also makes the step's time measurable
            t2 = time.perf_counter()
            waited += t1 - t0
            computed += t2 - t1
            steps += 1
        elapsed = time.perf_counter() - started
        util = self.sampler.stop() if self.sampler else None
        del it, dl
        return {
            "workers": workers,
            "pin_memory": pin,
            "samples_per_s": round(steps * batch / elapsed, 1),
            "data_wait_pct": round(100 * waited / max(waited + computed, 1e-9), 1),
            "gpu_util_pct": util,
            "steps": steps,
        }


def batch_sweep(b: Bench, budget_s: float) -> tuple[list[dict[str, Any]], str]:
    s, torch = b.scale, b.torch
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    batch = s.batch_min
    stopped = "max_batch"
    while batch <= s.batch_max:
        if rows and time.perf_counter() - started > budget_s:
            stopped = "time_budget"
            break
        try:
            row = b.compute(batch, Variant())
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(torch, exc) and not isinstance(exc, MemoryError):
                raise
            if b.sampler:
                b.sampler.stop()
            if b.device.type == "cuda":
                torch.cuda.empty_cache()
            log(f"batch {batch}: out of memory")
            stopped = "out_of_memory"
            break
        rows.append(row)
        log(f"batch {batch}: {row['samples_per_s']} samples/s, util {row['gpu_util_pct']}")
        batch *= 2
    return rows, stopped


def sweet_spot(rows: list[dict[str, Any]], key: str = "samples_per_s") -> dict[str, Any]:
    """The first row (smallest setting) within 5% of the best throughput."""
    best = max(r[key] for r in rows)
    return next(r for r in rows if r[key] >= (1 - WITHIN) * best)


def worker_counts(cpus: int) -> list[int]:
    """0, 1, 2, 4, ... up to the CPU count, and the CPU count itself."""
    counts = [0]
    n = 1
    while n < cpus:
        counts.append(n)
        n *= 2
    counts.append(cpus)
    return counts


def speedup(base: float, other: float) -> float:
    return round(other / base, 3) if base > 0 else math.nan


def flags_and_advice(doc: dict[str, Any], on_gpu: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Low-utilization flags with their likely cause, and what to change."""
    flags: list[dict[str, Any]] = []
    advice: list[dict[str, Any]] = []
    best_batch = doc["best_batch_size"]
    for r in doc["batch_sizes"]:
        u = r["gpu_util_pct"]
        if u is not None and u < LOW_UTIL_PCT:
            cause = (
                "batch too small: launch and Python overhead dominate each step"
                if r["batch_size"] < best_batch
                else "the model is too small to fill this GPU (CPU-side overhead per step)"
            )
            flags.append({"where": f"batch_size={r['batch_size']}", "gpu_util_pct": u, "likely_cause": cause})
    for w in doc["workers"]:
        u = w["gpu_util_pct"]
        # Without NVML (or on a CPU) the share of time spent waiting for data stands in for it.
        busy = u if u is not None else round(100 - w["data_wait_pct"], 1)
        if busy < LOW_UTIL_PCT:
            if w["data_wait_pct"] >= 100 - LOW_UTIL_PCT:
                cause = f"input pipeline: the step waits for the DataLoader {w['data_wait_pct']}% of the time" + (
                    " (decoding in the training process)" if w["workers"] == 0 else ""
                )
            else:
                cause = "host-side work between steps (copies, Python), not the data loader"
            where = f"workers={w['workers']} pin_memory={str(w['pin_memory']).lower()}"
            flags.append({"where": where, "gpu_util_pct": u, "busy_pct": busy, "likely_cause": cause})

    def tip(topic: str, text: str) -> None:
        advice.append({"topic": topic, "advice": text})

    tip(
        "batch_size",
        f"use batch size {best_batch}: the smallest within 5% of the best throughput "
        f"(the sweep stopped after {doc['batch_sizes'][-1]['batch_size']}: "
        f"{doc['batch_sweep_stopped'].replace('_', ' ')})",
    )
    bw = doc["best_workers"]
    best_row = max(doc["workers"], key=lambda w: w["samples_per_s"])
    zero = max((w for w in doc["workers"] if w["workers"] == 0), key=lambda w: w["samples_per_s"])
    gain = speedup(zero["samples_per_s"], best_row["samples_per_s"])
    tip(
        "dataloader",
        f"DataLoader(num_workers={bw['workers']}, pin_memory={bw['pin_memory']}): "
        + (
            f"{gain}x the throughput of loading in the training process"
            if bw["workers"]
            else "loading in the training process is as fast as any worker count here"
        )
        + f"; the step waits for data {bw['data_wait_pct']}% of the time",
    )
    if not on_gpu:
        tip(
            "input_pipeline",
            "on a CPU the loader workers and the training step share the same cores: "
            "run `provision tune` on the GPU host for the answer that matters",
        )
    elif bw["data_wait_pct"] >= 100 - LOW_UTIL_PCT:
        tip(
            "input_pipeline",
            "still waiting for data with every worker busy: decode/augment less on the CPU "
            "(pre-decoded or smaller stored samples, GPU-side augmentation such as DALI)",
        )
    amp = doc["amp"]
    if amp["speedup"] >= 1 + WITHIN:
        tip("mixed_precision", f"train with autocast({amp['dtype']}): {amp['speedup']}x fp32")
    else:
        tip(
            "mixed_precision",
            f"autocast({amp['dtype']}) gave {amp['speedup']}x fp32 here"
            + ("" if on_gpu else " (CPUs gain little; on tensor-core GPUs it is usually 2x or more)"),
        )
    cl = doc["channels_last"]
    tip(
        "channels_last",
        f"channels_last: {cl['speedup']}x contiguous"
        + (" -- use it" if cl["speedup"] >= 1 + WITHIN else " -- no gain here"),
    )
    gc = doc["grouped_conv"]
    tip(
        "grouped_conv",
        f"grouped 3x3 convolution (groups={gc['groups']}): {gc['params_ratio']}x the parameters, "
        f"{gc['speedup']}x the throughput of a standard one of the same width"
        + (" -- fewer FLOPs do not always mean faster kernels" if gc["speedup"] < 1 else ""),
    )
    for f in flags:
        tip("utilization", f"{f['where']}: under {LOW_UTIL_PCT:g}% -- {f['likely_cause']}")
    return flags, advice


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def pick_device(torch: Any, allow_cpu: bool) -> tuple[Any | None, str | None]:
    if torch.cuda.is_available():
        return torch.device("cuda", 0), None
    why = "torch has no CUDA" if torch.version.cuda is None else "CUDA is not usable from torch"
    if allow_cpu:
        return torch.device("cpu"), why
    return None, why


def run(allow_cpu: bool, scale_name: str | None, time_limit: float | None = None) -> tuple[dict[str, Any], int]:
    import torch

    started = time.perf_counter()
    device, why = pick_device(torch, allow_cpu)
    base: dict[str, Any] = {
        "schema": SCHEMA,
        "host": platform.node(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count() or 1,
    }
    if device is None:
        base.update({"ok": False, "verdict": "no-gpu", "error": f"no usable GPU ({why})"})
        return base, 1
    on_gpu = device.type == "cuda"
    scale = SCALES[scale_name or ("gpu" if on_gpu else "cpu")]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if on_gpu:
        torch.backends.cudnn.benchmark = True  # what a tuned training script does
    else:
        # On a CPU the training step and the DataLoader workers share the cores: give the step
        # half of them, or intra-op threads spin against the workers (10-20x slower steps on a
        # busy 2-core machine).
        torch.set_num_threads(max(1, cpus // 2))
    sampler, util_why = nvml_sampler(torch, device)
    b = Bench(torch, device, scale, sampler)
    log(f"device {device}, scale {scale.name}")
    budget = scale.budget_seconds if time_limit is None else min(scale.budget_seconds, 0.3 * time_limit)
    rows, stopped = batch_sweep(b, budget)
    if not rows:
        error = f"batch {scale.batch_min} does not fit in {device} memory"
        base.update({"ok": False, "verdict": "fail", "error": error})
        return base, 1
    best = sweet_spot(rows)
    wbatch = min(best["batch_size"], scale.workers_batch_max)
    workers: list[dict[str, Any]] = []
    skipped: list[int] = []
    for n in worker_counts(cpus):
        # Under --time-limit the sweep keeps time for the comparisons that follow it; the
        # counts left out are listed, never invented.
        if workers and time_limit is not None and time.perf_counter() - started > 0.75 * time_limit:
            skipped.append(n)
            continue
        for pin in (False, True) if on_gpu else (False,):  # pinning needs a GPU to copy to
            w = b.loader(wbatch, n, pin, Variant())
            workers.append(w)
            log(f"workers {n} pin {pin}: {w['samples_per_s']} samples/s, data wait {w['data_wait_pct']}%")
    best_w = sweet_spot(workers)
    bs = best["batch_size"]
    # Each comparison against a fresh baseline measured next to it, not the sweep's row: on a
    # shared machine throughput drifts over a minute.
    fp32 = b.compute(bs, Variant())
    amp = b.compute(bs, Variant(amp=True))
    prec = Variant(amp=amp["samples_per_s"] > fp32["samples_per_s"])
    contiguous = amp if prec.amp else fp32
    cl = b.compute(bs, Variant(amp=prec.amp, channels_last=True))
    grouped = b.compute(bs, Variant(amp=prec.amp, groups=scale.groups))
    doc = {
        **base,
        "ok": True,
        "verdict": "pass",
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if on_gpu else cpu_name(),
        "device_note": why,
        "torch_threads": torch.get_num_threads(),
        "gpu_util_source": "nvml" if sampler else None,
        "gpu_util_note": util_why,
        "scale": asdict(scale),
        "batch_sizes": [{k: r[k] for k in ("batch_size", "samples_per_s", "memory_gib", "gpu_util_pct")} for r in rows],
        "batch_sweep_stopped": stopped,
        "best_batch_size": bs,
        "workers_batch_size": wbatch,
        "workers": workers,
        "workers_skipped": skipped,
        "best_workers": {k: best_w[k] for k in ("workers", "pin_memory", "samples_per_s", "data_wait_pct")},
        "amp": {
            "dtype": str(amp_dtype(torch, device)).replace("torch.", ""),
            "batch_size": bs,
            "fp32_samples_per_s": fp32["samples_per_s"],
            "amp_samples_per_s": amp["samples_per_s"],
            "speedup": speedup(fp32["samples_per_s"], amp["samples_per_s"]),
            "fp32_memory_gib": fp32["memory_gib"],
            "amp_memory_gib": amp["memory_gib"],
        },
        "channels_last": {
            "amp": prec.amp,
            "contiguous_samples_per_s": contiguous["samples_per_s"],
            "channels_last_samples_per_s": cl["samples_per_s"],
            "speedup": speedup(contiguous["samples_per_s"], cl["samples_per_s"]),
        },
        "grouped_conv": {
            "groups": scale.groups,
            "width": scale.width,
            "standard_params": contiguous["params"],
            "grouped_params": grouped["params"],
            "params_ratio": round(grouped["params"] / contiguous["params"], 3),
            "standard_samples_per_s": contiguous["samples_per_s"],
            "grouped_samples_per_s": grouped["samples_per_s"],
            "speedup": speedup(contiguous["samples_per_s"], grouped["samples_per_s"]),
        },
    }
    doc["flags"], doc["recommendations"] = flags_and_advice(doc, on_gpu)
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    return doc, 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="provision's tuning job (prints one JSON document)")
    ap.add_argument("--allow-cpu", action="store_true", help="measure on the CPU when there is no GPU")
    ap.add_argument("--scale", choices=sorted(SCALES), help="size of the run (default: gpu or cpu)")
    ap.add_argument("--time-limit", type=float, help="seconds: shorten the sweeps to end near this")
    args = ap.parse_args(argv)
    try:
        doc, rc = run(args.allow_cpu, args.scale, args.time_limit)
    except ImportError as exc:
        doc, rc = {"schema": SCHEMA, "ok": False, "verdict": "fail", "error": f"cannot import {exc.name}"}, 1
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
