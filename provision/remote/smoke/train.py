"""Training: a small ResNet-style CNN on synthetic data made on the device, for a fixed number of steps.

The data is learnable on purpose (each class is a fixed random image plus noise), so a working
stack drives the loss from ln(10) ~ 2.3 to well under the bound within the fixed steps; a broken
kernel, cuDNN or numerics does not. Everything stays on the device: batches are generated there
and the loss is read back once at the end, so the GPU never waits for the host inside the loop.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int
    image: int  # square images, 3 channels
    width: int  # channels of the first stage; doubles per stage
    classes: int = 10
    lr: float = 0.05
    warmup: int = 5  # steps not counted in samples/s (cudnn.benchmark autotunes in them)
    loss_bound: float = 0.5
    noise: float = 1.0

    @classmethod
    def for_gpu(cls, steps: int = 200) -> TrainConfig:
        # batch 1024: enough work per step that the GPU, not Python launching kernels, sets the pace
        return cls(steps=steps, batch=1024, image=32, width=64)

    @classmethod
    def for_cpu(cls, steps: int = 30) -> TrainConfig:
        return cls(steps=steps, batch=32, image=16, width=8, warmup=2)


def build_model(torch: Any, cfg: TrainConfig) -> Any:
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc,name-defined]
        """conv-bn-relu-conv-bn plus the identity: the ResNet basic block."""

        def __init__(self, ch: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(ch, ch, 3, padding=1, bias=False),
                nn.BatchNorm2d(ch),
                nn.ReLU(inplace=True),
                nn.Conv2d(ch, ch, 3, padding=1, bias=False),
                nn.BatchNorm2d(ch),
            )
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.act(x + self.body(x))

    def down(cin: int, cout: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    w = cfg.width
    return nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(inplace=True),
        Block(w),
        down(w, 2 * w),
        Block(2 * w),
        down(2 * w, 4 * w),
        Block(4 * w),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * w, cfg.classes),
    )


def memory_format(torch: Any, device: Any) -> Any:
    """channels_last on a GPU (tensor-core convolutions want NHWC); on the CPU it is the slower path."""
    return torch.channels_last if device.type == "cuda" else torch.contiguous_format


class Synthetic:
    """Endless batches made on the device: class prototype + Gaussian noise."""

    def __init__(self, torch: Any, device: Any, cfg: TrainConfig, seed: int = 0) -> None:
        self.torch, self.device, self.cfg = torch, device, cfg
        self.gen = torch.Generator(device=device).manual_seed(seed)
        proto_gen = torch.Generator(device=device).manual_seed(1234)  # same classes on every rank
        self.protos = torch.randn(cfg.classes, 3, cfg.image, cfg.image, device=device, generator=proto_gen)

    def batch(self) -> tuple[Any, Any]:
        torch, cfg = self.torch, self.cfg
        y = torch.randint(0, cfg.classes, (cfg.batch,), device=self.device, generator=self.gen)
        noise = torch.randn(cfg.batch, 3, cfg.image, cfg.image, device=self.device, generator=self.gen)
        x = self.protos[y] + cfg.noise * noise
        return x.contiguous(memory_format=memory_format(torch, self.device)), y


class Sgd:
    """SGD with Nesterov momentum, written out: ``torch.optim`` imports torch._dynamo on first use,
    which costs more than a CPU run of this whole job. ``param_groups`` lets GradScaler drive it."""

    def __init__(self, torch: Any, params: Any, lr: float, momentum: float = 0.9) -> None:
        self.torch, self.lr, self.momentum = torch, lr, momentum
        self.param_groups = [{"params": list(params)}]
        self.buffers: list[Any] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            p.grad = None

    def step(self) -> None:
        torch = self.torch
        with torch.no_grad():
            pairs = [(p, p.grad) for p in self.param_groups[0]["params"] if p.grad is not None]
            params, grads = [p for p, _ in pairs], [g for _, g in pairs]
            if not self.buffers:
                self.buffers = [g.clone() for g in grads]
            else:
                torch._foreach_mul_(self.buffers, self.momentum)
                torch._foreach_add_(self.buffers, grads)
            # Nesterov: p -= lr * (g + momentum * buf)
            update = torch._foreach_add(grads, self.buffers, alpha=self.momentum)
            torch._foreach_add_(params, update, alpha=-self.lr)


class Trainer:
    """Model, optimizer and mixed precision for one device: bf16 autocast where the GPU has bf16,
    else fp16 with a gradient scaler; fp32 on the CPU."""

    def __init__(self, torch: Any, device: Any, cfg: TrainConfig, model: Any | None = None) -> None:
        self.torch, self.device, self.cfg = torch, device, cfg
        self.model = model if model is not None else build_model(torch, cfg).to(device)
        self.model = self.model.to(memory_format=memory_format(torch, device))
        self.opt = Sgd(torch, self.model.parameters(), lr=cfg.lr)
        cuda = device.type == "cuda"
        if cuda and torch.cuda.is_bf16_supported():
            self.precision, self.dtype = "bf16", torch.bfloat16
        elif cuda:
            self.precision, self.dtype = "fp16", torch.float16
        else:
            self.precision, self.dtype = "fp32", None
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def wrap(self, model: Any) -> None:
        """Swap in a wrapped model (DDP) that shares the parameters the optimizer holds."""
        self.model = model

    def _autocast(self) -> Any:
        if self.dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(device_type="cuda", dtype=self.dtype)

    def step(self, x: Any, y: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self.loss_fn(self.model(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        return loss.detach()


def train(torch: Any, device: Any, cfg: TrainConfig, on_timed_start: Any = None) -> dict[str, Any]:
    """Run ``cfg.steps`` steps; ``on_timed_start`` is called once the warm-up steps are done."""
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    trainer = Trainer(torch, device, cfg)
    data = Synthetic(torch, device, cfg)
    losses = torch.zeros(cfg.steps, device=device)
    timed_from = min(cfg.warmup, cfg.steps - 1)
    started = time.perf_counter()
    for i in range(cfg.steps):
        if i == timed_from:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            if on_timed_start is not None:
                on_timed_start()
        x, y = data.batch()
        losses[i] = trainer.step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - started
    values = [float(v) for v in losses.float().cpu().tolist()]
    tail = values[-max(1, min(10, cfg.steps // 5)) :]
    every = max(1, len(values) // 50)  # at most ~50 points of the curve, for the report's plot
    curve = [(i + 1, round(v, 4)) for i, v in enumerate(values) if i % every == 0 and math.isfinite(v)]
    last = sum(tail) / len(tail)
    return {
        "device": device.type,
        "precision": trainer.precision,
        "steps": cfg.steps,
        "batch": cfg.batch,
        "image": cfg.image,
        "loss_first": round(values[0], 4) if math.isfinite(values[0]) else None,
        "loss_last": round(last, 4) if math.isfinite(last) else None,
        "loss_bound": cfg.loss_bound,
        "loss_curve": [v for _, v in curve],
        "loss_curve_steps": [step for step, _ in curve],  # the step (from 1) of each point: the plot's x axis
        "samples_per_s": round((cfg.steps - timed_from) * cfg.batch / max(elapsed, 1e-9), 1),
        "elapsed_s": round(elapsed, 3),
        **({} if math.isfinite(last) else {"error": "the loss is not finite (NaN or inf)"}),
    }
