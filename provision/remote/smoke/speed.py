"""Speed per GPU: dense GEMM (bf16 or fp16, and TF32) and copy bandwidth (device, pinned host).

On a GPU every figure is timed with CUDA events after a warm-up and is the best of several
trials (the figure a healthy GPU reaches, which is what a pass line compares with). The same
functions run on the CPU at small sizes (``--allow-cpu`` and the CPU dry run of
benchmarks/gpu_check.sh), timed with ``time.perf_counter``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _trial_s(device: Any) -> float:
    # A GPU trial long enough to hide event overhead; on the CPU the figures are only informational.
    return 0.05 if device.type == "cuda" else 0.01


class Timer:
    """Times a callable on one device: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def seconds(self, fn: Callable[[], Any], reps: int) -> float:
        if not self.cuda:
            started = time.perf_counter()
            for _ in range(reps):
                fn()
            return time.perf_counter() - started
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0

    def best(self, fn: Callable[[], Any], *, trial_s: float, trials: int, warmup: int = 3) -> tuple[float, int]:
        """Best seconds per call over ``trials`` trials of about ``trial_s`` each, and reps/trial."""
        for _ in range(warmup):
            fn()
        self.sync()
        once = max(self.seconds(fn, 1), 1e-6)
        reps = max(1, min(1000, int(trial_s / once)))
        best = min(self.seconds(fn, reps) for _ in range(trials))
        return best / reps, reps


def gemm_tflops(torch: Any, device: Any, n: int, dtype: Any, *, tf32: bool = False, trials: int = 5) -> float:
    """TFLOP/s of an n x n x n matmul on random data (2 n^3 flops per call)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    c = torch.empty(n, n, device=device, dtype=dtype)
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = tf32
    try:
        seconds, _ = Timer(torch, device).best(
            lambda: torch.matmul(a, b, out=c), trial_s=_trial_s(device), trials=trials
        )
    finally:
        matmul.allow_tf32 = before
    return 2.0 * n**3 / seconds / 1e12


def copy_d2d_gbps(torch: Any, device: Any, nbytes: int, trials: int = 5) -> float:
    """Device-to-device copy, counted as bytes read + bytes written (as CUDA's bandwidthTest does)."""
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    seconds, _ = Timer(torch, device).best(lambda: dst.copy_(src), trial_s=_trial_s(device), trials=trials)
    return 2.0 * nbytes / seconds / 1e9


def copy_host_gbps(torch: Any, device: Any, nbytes: int, trials: int = 5) -> tuple[float, float]:
    """Pinned host -> device and device -> host bandwidth in GB/s."""
    pinned = device.type == "cuda"
    host = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=pinned).fill_(1.0)
    dev = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    timer = Timer(torch, device)
    h2d, _ = timer.best(lambda: dev.copy_(host, non_blocking=True), trial_s=_trial_s(device), trials=trials)
    d2h, _ = timer.best(lambda: host.copy_(dev, non_blocking=True), trial_s=_trial_s(device), trials=trials)
    return nbytes / h2d / 1e9, nbytes / d2h / 1e9


def kernel_runs(torch: Any, device: Any) -> tuple[bool, str | None]:
    """A small matmul whose result is known: catches 'no kernel image' and broken math."""
    try:
        a = torch.full((64, 64), 2.0, device=device)
        value = float(torch.matmul(a, a).sum().item())
    except Exception as exc:
        return False, " ".join(str(exc).split())[:300]
    expected = 64 * 64 * 64 * 4.0
    return (
        value == expected,
        None if value == expected else f"64x64 matmul sum {value}, expected {expected}",
    )


def measure(torch: Any, device: Any, *, gemm_n: int, copy_bytes: int, trials: int) -> dict[str, float]:
    """Every speed figure for one device."""
    figures: dict[str, float] = {}
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        half = torch.bfloat16 if bf16 else torch.float16
        figures["gemm_bf16" if bf16 else "gemm_fp16"] = gemm_tflops(torch, device, gemm_n, half, trials=trials)
        figures["gemm_tf32"] = gemm_tflops(torch, device, gemm_n, torch.float32, tf32=True, trials=trials)
    else:
        # CPU: fp32 only (bf16 GEMM on a CPU says little about the host); informational figures
        figures["gemm_fp32"] = gemm_tflops(torch, device, gemm_n, torch.float32, trials=trials)
    figures["copy_d2d"] = copy_d2d_gbps(torch, device, copy_bytes, trials=trials)
    if device.type == "cuda":
        h2d, d2h = copy_host_gbps(torch, device, copy_bytes, trials=trials)
        figures["copy_h2d"], figures["copy_d2h"] = h2d, d2h
    return figures
