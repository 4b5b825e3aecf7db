"""The bundled smoke job: proves that a host trains on every GPU, at the speed it should, with the
versions it was meant to have. One JSON document (schema ``provision.verify/1``) plus a summary.

Runs on the target with the target's Python: the standard library, torch, and nvidia-ml-py when
present. It never imports the rest of ``provision``; ``provision verify`` copies this folder to a
host and runs ``python smoke/job.py``. Usage::

    python job.py [--expect FILE] [--allow-cpu] [--json-out FILE] [--json] [--quick] ...
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint H:29400 \\
        job.py --multi-host [--allow-cpu]        # the same checks across hosts (opt-in)

Exit status: 0 pass, 1 fail or no-gpu, 2 bad arguments.
"""

from __future__ import annotations

import os
import sys

if not __package__:
    # Run as a file (python /path/smoke/job.py, or a spawned DDP rank re-running it): make this
    # folder importable as a package of its own name so the relative imports below work. The
    # folder itself leaves sys.path so its module names never shadow another library's.
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path.pop(0)
    sys.path.append(os.path.dirname(_here))
    __package__ = os.path.basename(_here)
    __import__(__package__)

import argparse
import contextlib
import json
import resource
import socket
import tempfile
import time
from typing import Any

from . import dist, environment, frameworks, speed, verdict
from .nvml import Nvml, Sampler
from .train import TrainConfig, train

SCHEMA = "provision.verify/1"
HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ("speed", "train", "ddp", "frameworks")


class BadArguments(Exception):
    pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="job.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--expect",
        metavar="FILE",
        help="JSON object of expected versions "
        "(driver, cuda_driver, torch, torch_cuda, cudnn, nccl, python, tensorflow, jax); "
        "missing keys are not checked",
    )
    p.add_argument("--allow-cpu", action="store_true", help="with no usable GPU, verify on the CPU and let it pass")
    p.add_argument("--json-out", metavar="FILE", help="write the JSON report here")
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout (the summary stays on stderr)")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    p.add_argument("--host", default=None, help="the host's name in the report (default: hostname)")
    p.add_argument(
        "--references",
        metavar="FILE",
        default=os.path.join(HERE, "references.json"),
        help="reference figures per GPU model (default: references.json beside this file)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes everywhere (a dry run of every code path)")
    p.add_argument("--gemm-size", type=int, default=None, help="GEMM n (default 8192 on a GPU, 256 on the CPU)")
    p.add_argument("--copy-mib", type=int, default=None, help="copy buffer MiB (default 512 on a GPU, 16 on the CPU)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 200 on a GPU, 30 on the CPU)")
    p.add_argument("--skip", action="append", default=[], choices=STAGES, help="leave out a stage (repeatable)")
    p.add_argument(
        "--cpu-ranks",
        type=int,
        default=0,
        help="with no GPU: run the DDP check with this many CPU ranks (gloo); 0 leaves it out",
    )
    p.add_argument(
        "--multi-host",
        action="store_true",
        help="run under torchrun: the all-reduce and DDP check across every rank of every host",
    )
    return p.parse_args(argv)


def load_json_object(path: str, what: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise BadArguments(f"cannot read the {what} {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise BadArguments(f"the {what} {path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadArguments(f"the {what} {path} must hold a JSON object")
    return doc


def load_expect(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    doc = load_json_object(path, "expectations file")
    return {str(k): str(v) for k, v in doc.items() if v is not None}


class Stages:
    """Runs each stage so that an exception becomes an error in the report, never a lost report."""

    def __init__(self, m: dict[str, Any]) -> None:
        self.m = m

    @contextlib.contextmanager
    def stage(self, name: str) -> Any:
        try:
            yield
        except Exception as exc:
            self.m["errors"].append(
                {"stage": name, "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
            )


def collect_environment(torch: Any, nvml: Nvml | None, m: dict[str, Any]) -> None:
    torch_count, torch_error = environment.torch_gpu_state(torch)
    nvml_gpus = [nvml.describe(i) for i in range(nvml.count() or 0)] if nvml else []
    m["counts"] = {
        "torch": torch_count,
        "nvml": None if nvml is None else len(nvml_gpus),
        "lspci": environment.lspci_gpu_count(),
    }
    m["torch_error"] = torch_error
    on_gpu = torch_count > 0
    m["versions"] = environment.versions(torch, nvml, on_gpu)
    m["arch_list"] = list(torch.cuda.get_arch_list()) if torch.version.cuda else []
    gpus = environment.torch_gpus(torch, torch_count) if on_gpu else [dict(g) for g in nvml_gpus]
    for gpu in gpus:
        index = environment.nvml_index_for(gpu, nvml_gpus) if on_gpu else gpu["index"]
        gpu["nvml_index"] = index
        gpu["health"] = nvml.health(index) if nvml is not None and index is not None else None
    m["gpus"] = gpus
    if nvml is None and (on_gpu or m["counts"]["lspci"]):
        m["warnings"].append({"code": "no_nvml", "message": f"GPU health and utilization not read: {Nvml.why}"})


def measure(args: argparse.Namespace, torch: Any, nvml: Nvml | None, m: dict[str, Any]) -> None:
    """Everything after the environment: speed, training, DDP, other frameworks."""
    stages = Stages(m)
    on_gpu = m["counts"]["torch"] > 0
    quick = args.quick
    if on_gpu:
        gemm_n = args.gemm_size or (1024 if quick else 8192)
        copy_bytes = (args.copy_mib or (64 if quick else 512)) * 2**20
    else:
        gemm_n = args.gemm_size or (128 if quick else 256)
        copy_bytes = (args.copy_mib or 16) * 2**20
    trials = 2 if quick or not on_gpu else 5
    runnable = []
    sampler = (
        Sampler(nvml, [g["nvml_index"] for g in m["gpus"] if g["nvml_index"] is not None])
        if nvml is not None and on_gpu
        else None
    )
    with sampler or contextlib.nullcontext():
        for gpu in m["gpus"] if on_gpu else []:
            device = torch.device("cuda", gpu["index"])
            # The arch check comes before any kernel, so 'no kernel image' is reported plainly.
            if not verdict.arch_supported(gpu["compute_capability"], m["arch_list"])[0]:
                continue
            with stages.stage(f"kernel_gpu{gpu['index']}"):
                gpu["kernel_ok"], gpu["kernel_error"] = speed.kernel_runs(torch, device)
            if not gpu.get("kernel_ok"):
                continue
            runnable.append(gpu)
            if "speed" not in args.skip:
                with stages.stage(f"speed_gpu{gpu['index']}"):
                    gpu["speed"] = speed.measure(torch, device, gemm_n=gemm_n, copy_bytes=copy_bytes, trials=trials)
        if not on_gpu and "speed" not in args.skip:
            with stages.stage("speed_cpu"):
                m["cpu_speed"] = speed.measure(
                    torch, torch.device("cpu"), gemm_n=gemm_n, copy_bytes=copy_bytes, trials=trials
                )
        if "train" not in args.skip and (runnable or not on_gpu):
            with stages.stage("train"):
                m["training"] = run_training(args, torch, sampler, runnable[0] if runnable else None)
    if sampler is not None:
        for gpu in m["gpus"]:
            if gpu.get("health") is not None and gpu["nvml_index"] is not None:
                sampler.merge_into(gpu["nvml_index"], gpu["health"])
    if "ddp" not in args.skip:
        ranks = len(runnable) if on_gpu else args.cpu_ranks
        if ranks >= 2:
            if on_gpu:  # give the ranks the memory this process cached in earlier stages
                torch.cuda.empty_cache()
            with stages.stage("ddp"), tempfile.TemporaryDirectory() as tmp:
                cfg = TrainConfig.for_gpu(steps=10) if on_gpu else TrainConfig.for_cpu(steps=8)
                nbytes = (64 if quick else 256) * 2**20 if on_gpu else 2**20
                m["distributed"] = dist.local(ranks, os.path.join(tmp, "rank0.json"), nbytes, cfg)
    if "frameworks" not in args.skip:
        for name in frameworks.installed():
            with stages.stage(name):
                m["frameworks"][name] = frameworks.check(name)
                m["versions"][name] = m["frameworks"][name].get("version")


def run_training(
    args: argparse.Namespace, torch: Any, sampler: Sampler | None, gpu: dict[str, Any] | None
) -> dict[str, Any]:
    if gpu is None:
        cfg = TrainConfig.for_cpu(args.steps or (20 if args.quick else 30))
        return train(torch, torch.device("cpu"), cfg)
    cfg = TrainConfig.for_gpu(args.steps or (30 if args.quick else 200))
    watched = gpu["nvml_index"]

    def timed_start() -> None:  # utilization counts only once the warm-up steps are done
        if sampler is not None and watched is not None:
            sampler.util[watched] = []

    result = train(torch, torch.device("cuda", gpu["index"]), cfg, on_timed_start=timed_start)
    if sampler is not None and watched is not None:
        sampler.sample_once()  # at least one reading, however short the run
        mean = sampler.mean_util(watched)
        result["gpu_util_mean_pct"] = None if mean is None else round(mean, 1)
        result["gpu_util_samples"] = len(sampler.util[watched])
        result["gpu_util_series"] = list(sampler.util[watched])  # for the report's plot over time
        result["gpu_util_period_s"] = sampler.period  # seconds between two samples: the plot's x axis
    else:
        result["gpu_util_mean_pct"] = None
    result["gpu"] = gpu["index"]
    return result


def memory_used(torch: Any, on_gpu: bool) -> dict[str, Any]:
    self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    used: dict[str, Any] = {"host_peak_gib": round(max(self_kib, child_kib) / 2**20, 3)}
    if on_gpu:
        # torch's own peak; DDP ranks are other processes and report nothing here
        used["gpu_peak_gib"] = [
            round(torch.cuda.max_memory_reserved(i) / 2**30, 3) for i in range(torch.cuda.device_count())
        ]
    return used


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    references = load_json_object(args.references, "references file")
    expect = load_expect(args.expect)
    m: dict[str, Any] = {
        "host": args.host or socket.gethostname(),
        "warnings": [],
        "errors": [],
        "frameworks": {},
    }
    try:
        import torch
    except ImportError as exc:
        m["errors"].append({"stage": "import", "message": f"torch is not importable: {exc}"})
        m["counts"], m["versions"] = {"torch": 0}, {}
        return build_report(m, references, expect, args, started)
    nvml = Nvml.open()
    try:
        collect_environment(torch, nvml, m)
        on_gpu = m["counts"]["torch"] > 0
        if args.multi_host:
            world = int(os.environ.get("WORLD_SIZE", "1"))
            cfg = TrainConfig.for_gpu(steps=10) if on_gpu else TrainConfig.for_cpu(steps=8)
            nbytes = 256 * 2**20 if on_gpu else 2**20
            with Stages(m).stage("multihost"):
                m["multihost"] = dist.run_rank(int(os.environ.get("LOCAL_RANK", "0")), world, None, nbytes, cfg)
        elif on_gpu or args.allow_cpu:
            measure(args, torch, nvml, m)
        m["memory"] = memory_used(torch, on_gpu)
    finally:
        if nvml is not None:
            nvml.close()
    return build_report(m, references, expect, args, started)


def build_report(
    m: dict[str, Any],
    references: dict[str, Any],
    expect: dict[str, str],
    args: argparse.Namespace,
    started: float,
) -> dict[str, Any]:
    decision = verdict.decide(m, references, expect, args.allow_cpu)
    gpus = [
        {
            k: g.get(k)
            for k in (
                "index",
                "name",
                "compute_capability",
                "memory_gib",
                "uuid",
                "health",
                "speed",
                "kernel_ok",
                "kernel_error",
            )
        }
        for g in m.get("gpus", [])
    ]
    return {
        "schema": SCHEMA,
        "host": m["host"],
        "ok": decision["ok"],
        "verdict": decision["verdict"],
        "duration_s": round(time.monotonic() - started, 2),
        "versions": m.get("versions", {}),
        "expected": expect,
        "counts": m.get("counts", {}),
        "torch_error": m.get("torch_error"),
        "arch_list": m.get("arch_list", []),
        "errors": m.get("errors", []),
        "gpus": gpus,
        "checks": decision["checks"],
        "warnings": decision["warnings"],
        "training": m.get("training"),
        "distributed": m.get("distributed"),
        "multihost": m.get("multihost"),
        "frameworks": m.get("frameworks", {}),
        "cpu_speed": m.get("cpu_speed"),
        "memory": m.get("memory"),
    }


def summary(report: dict[str, Any]) -> str:
    v = report["versions"]
    lines = [f"provision verify: {report['host']}: {report['verdict'].upper()} ({report['duration_s']} s)"]
    names = [g.get("name") for g in report["gpus"]]
    gpus = f"{len(names)} x {names[0]}" if names and len(set(names)) == 1 else (", ".join(map(str, names)) or "none")
    cudnn = verdict.cudnn_dotted(str(v["cudnn"])) if v.get("cudnn") else None
    lines.append(
        f"  GPUs: {gpus}; driver {v.get('driver')}, torch {v.get('torch')}, CUDA {v.get('torch_cuda')}, "
        f"cuDNN {cudnn}, NCCL {v.get('nccl')}"
    )
    for gpu in report["gpus"]:
        figures = ", ".join(f"{k} {val:.1f}" for k, val in (gpu.get("speed") or {}).items())
        if figures:
            lines.append(f"  GPU {gpu['index']}: {figures}")
    t = report.get("training")
    if t and t.get("loss_first") is not None:
        util = t.get("gpu_util_mean_pct")
        lines.append(
            f"  training: {t['device']} {t.get('precision')}, {t['steps']} steps, loss {t['loss_first']} -> "
            f"{t['loss_last']} (bound {t['loss_bound']}), {t['samples_per_s']} samples/s"
            + (f", GPU util {util}%" if util is not None else "")
        )
    for c in report["checks"]:
        if not c["ok"]:
            lines.append(f"  FAIL {c['name']}: {c.get('message')}")
    lines += [f"  warning: {w['message']}" for w in report["warnings"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        report = run(args)
    except BadArguments as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if args.multi_host and int(os.environ.get("RANK", "0")) != 0:
        return 0 if report["ok"] else 1  # rank 0 speaks for the group
    text = json.dumps(report, indent=2, allow_nan=False, default=str)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    if args.json:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    if not args.quiet:
        sys.stderr.write(summary(report) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
