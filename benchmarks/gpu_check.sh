#!/usr/bin/env bash
# The GPU check for the smoke job: one prepared run for a machine with an NVIDIA GPU (sized for one
# H200: well under 8 minutes), torch, nvidia-ml-py and a driver, and no network.
#
#   benchmarks/gpu_check.sh DIR          # on the GPU machine, from the repository root
#   benchmarks/gpu_check.sh DIR --cpu    # the same steps with tiny sizes on the CPU (a dry run)
#
# It needs no installed provision package: the smoke job runs standalone from provision/remote/smoke/.
# Writes into DIR:
#   verify.json      the job's report (schema provision.verify/1), from `job.py --json-out`
#   reference.json   an independent best-of torch.matmul measurement on the same GPU
#   memory.json      peak GPU memory (nvidia-smi every 200 ms: the whole device, CUDA context
#                    included) and peak host memory (max RSS of the job and its children)
#   summary.json     time to verdict, GEMM job / reference ratio, utilization, memory vs targets
#   env.txt, nvidia-smi.txt, job.stderr, gpu_check.log
#   provision/       provision itself on the machine (issue 14): `probe --local` (probe.json), a
#                    plan that keeps the driver it finds (`plan --local --driver none`: plan.json,
#                    plan.txt, provision.lock) and `up --local --check` (up_check.json); skipped,
#                    not failed, where provision's own dependencies are not importable (carry
#                    them as wheels: benchmarks/gpu_wheels.sh)
#   tune/            `provision tune`'s job on the same GPU (benchmarks/tune_gpu.sh: tune.json,
#                    tune.md, tune.log), run last so that it cannot disturb the job's figures
# Exit status: 0 when every step ran (the targets' outcome is in summary.json), 1 when a step
# failed or timed out, 2 for bad arguments.
set -u -o pipefail

usage() { echo "usage: $0 DIR [--cpu]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
OUT=$1
MODE=gpu
if [[ $# -eq 2 ]]; then [[ $2 == --cpu ]] || usage; MODE=cpu; fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOB=$ROOT/provision/remote/smoke/job.py
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/gpu_check.log
: > "$LOG"
log() { echo "[gpu_check $(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
failed=0
step() {  # step NAME SECONDS CMD... : run with a time limit, note failure, keep going
  local name=$1 limit=$2; shift 2
  log "$name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  if [[ $rc -ne 0 ]]; then log "$name FAILED (exit $rc)"; failed=1; fi
  return 0
}

[[ -f $JOB ]] || { log "no smoke job at $JOB (run from a provision checkout)"; exit 1; }
log "mode $MODE, python $(command -v "$PY"), out $OUT"

# 1. What is there: driver, GPUs, torch.
if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 60 sh -c "nvidia-smi -q > '$OUT/nvidia-smi.txt' 2>&1"
elif [[ $MODE == gpu ]]; then
  log "nvidia-smi not found: no driver?"; failed=1
fi
step env 120 "$PY" - "$OUT/env.txt" <<'PY'
import platform, sys
import torch
lines = [f"python {platform.python_version()}", f"torch {torch.__version__} cuda {torch.version.cuda}",
         f"cuda available {torch.cuda.is_available()} devices {torch.cuda.device_count()}"]
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    lines.append(f"gpu {i} {p.name} cc {p.major}.{p.minor} {p.total_memory / 2**30:.0f} GiB")
lines.append(f"arch list {torch.cuda.get_arch_list() if torch.version.cuda else []}")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY

# 2. The job, timed from start to verdict, with the device's memory sampled beside it.
SAMPLER_PID=""
if command -v nvidia-smi >/dev/null && [[ $MODE == gpu ]]; then
  timeout 400 nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 200 \
    > "$OUT/gpu_memory.csv" 2>/dev/null &
  SAMPLER_PID=$!
fi
JOB_ARGS=(--json-out "$OUT/verify.json")
# CPU: tiny sizes, the same stages a one-GPU host runs (no DDP: that needs two GPUs)
[[ $MODE == cpu ]] && JOB_ARGS+=(--allow-cpu --quick)
log "job: $PY $JOB ${JOB_ARGS[*]}"
step job 300 "$PY" - "$OUT/job_run.json" "$JOB" "${JOB_ARGS[@]}" <<'PY' 2> "$OUT/job.stderr"
# Runs the job as a child, timing it and reading the peak RSS of it and its DDP ranks.
import json, resource, subprocess, sys, time
out, cmd = sys.argv[1], [sys.executable, *sys.argv[2:]]
started = time.monotonic()
rc = subprocess.run(cmd).returncode
wall = time.monotonic() - started
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
json.dump({"command": cmd, "exit_status": rc, "wall_s": round(wall, 2),
           "host_peak_gib": round(peak_kib / 2**20, 3)}, open(out, "w"), indent=2)
print(f"job exit {rc} in {wall:.1f} s, host peak {peak_kib / 2**20:.2f} GiB")
sys.exit(0 if rc in (0, 1) else rc)  # a failing verdict is a result, not a broken step
PY
cat "$OUT/job.stderr" >> "$LOG"
if [[ -n $SAMPLER_PID ]]; then kill "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null; fi

# 3. The independent reference: best-of torch.matmul, written apart from the job's own timing.
step reference 180 "$PY" - "$OUT/reference.json" "$MODE" <<'PY'
import json, sys, time
import torch
out, mode = sys.argv[1], sys.argv[2]
cuda = mode == "gpu"
dev = torch.device("cuda" if cuda else "cpu")
n = 8192 if cuda else 256
def best_of(dtype, tf32, calls=10, rounds=20):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    # normal data like the job's: a GEMM's power draw, and so its clocks, depend on the data
    a = torch.randn(n, n, device=dev).to(dtype)
    b = torch.randn(n, n, device=dev).to(dtype)
    for _ in range(5):
        torch.matmul(a, b)
    best = float("inf")
    for _ in range(rounds if cuda else 3):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            c = torch.matmul(a, b)
        if cuda:
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls)
    del c
    return 2 * n**3 / best / 1e12
figures = {"n": n, "device": torch.cuda.get_device_name(0) if cuda else "cpu", "method":
           "best of rounds of 10 back-to-back torch.matmul calls, perf_counter around synchronize"}
if cuda:
    half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    figures["gemm_bf16" if half is torch.bfloat16 else "gemm_fp16"] = best_of(half, False)
    figures["gemm_tf32"] = best_of(torch.float32, True)
else:
    figures["gemm_fp32"] = best_of(torch.float32, False)
json.dump(figures, open(out, "w"), indent=2)
print(json.dumps(figures))
PY

# 4. Memory and the summary against the targets (stdlib only).
step summary 60 "$PY" - "$OUT" "$MODE" <<'PY'
import csv, json, os, sys
out, mode = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return None
report, ref, run = load("verify.json"), load("reference.json") or {}, load("job_run.json") or {}
gpu_peak = {}
try:
    for row in csv.reader(open(os.path.join(out, "gpu_memory.csv"))):
        if len(row) == 2 and row[1].strip().isdigit():
            gpu_peak[row[0].strip()] = max(gpu_peak.get(row[0].strip(), 0), int(row[1]))
except OSError:
    pass
memory = {"gpu_device_peak_gib": {k: round(v / 1024, 2) for k, v in gpu_peak.items()},
          "gpu_torch_peak_gib": (report or {}).get("memory", {}).get("gpu_peak_gib"),
          "host_peak_gib": run.get("host_peak_gib")}
json.dump(memory, open(os.path.join(out, "memory.json"), "w"), indent=2)
summary = {"mode": mode, "verdict": (report or {}).get("verdict"), "time_to_verdict_s": run.get("wall_s"),
           "job_duration_s": (report or {}).get("duration_s"), "memory": memory, "targets": {}}
if report:
    checks = {(c["name"], c.get("gpu")): c for c in report["checks"]}
    gemm_key = next((k for k in ("gemm_bf16", "gemm_fp16", "gemm_fp32") if k in ref), None)
    job_gemm = (checks.get((gemm_key, 0)) or checks.get((f"cpu_{gemm_key}", None)) or {}).get("value")
    if gemm_key and job_gemm is not None:
        summary["gemm"] = {"metric": gemm_key, "job": job_gemm, "reference": round(ref[gemm_key], 3),
                           "ratio": round(job_gemm / ref[gemm_key], 3)}
    util = (report.get("training") or {}).get("gpu_util_mean_pct")
    summary["gpu_util_mean_pct"] = util
    if mode == "gpu":
        t = summary["targets"]
        t["time_to_verdict_le_60s"] = run.get("wall_s") is not None and run["wall_s"] <= 60
        t["gemm_within_5pct_of_reference"] = "gemm" in summary and abs(summary["gemm"]["ratio"] - 1) <= 0.05
        t["util_ge_90pct"] = util is not None and util >= 90
        t["gpu_memory_lt_8gib"] = all(v < 8 for v in memory["gpu_device_peak_gib"].values()) and bool(gpu_peak)
        t["host_memory_lt_4gib"] = memory["host_peak_gib"] is not None and memory["host_peak_gib"] < 4
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
print(json.dumps(summary, indent=2))
sys.exit(0 if report else 1)
PY

# 5. provision itself on this host: what it probes, a plan that keeps the driver that is there
# (driver: none, not managed: nothing of it is planned) for the torch the machine has (no network:
# nothing could be fetched), and `up --check`, which changes nothing.
if PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import provision.cli.app, ansible_runner' 2>/dev/null; then
  P=$OUT/provision
  mkdir -p "$P"
  TORCH=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
  # install.lock_closure never: the machine reaches no index, so the wheel closure cannot be locked
  { echo "stack:"; echo "  driver: none"; echo "  frameworks: [\"torch==${TORCH:-none}\"]"
    echo "install:"; echo "  lock_closure: never"
    [[ $MODE == cpu ]] && { echo "verify:"; echo "  allow_cpu: true"; }; } > "$P/provision.yaml"
  # provision runs from this checkout, with ansible-playbook beside the Python that runs it
  PROV=(env "PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}" "PATH=$(dirname "$(command -v "$PY")"):$PATH" "$PY" -m provision)
  cd "$P" || exit 1
  step provision-probe 120 sh -c '"$@" > probe.json' - "${PROV[@]}" probe --local --json
  step provision-plan 120 sh -c '"$@" --json > plan.json && "$@" > plan.txt' - \
    "${PROV[@]}" plan --local -c provision.yaml --out run --lock provision.lock
  step provision-up-check 300 sh -c '"$@" > up_check.json 2> up_check.stderr' - \
    "${PROV[@]}" up --local --check --yes -c provision.yaml --json
  # the run's report says why a host failed (the --json host object has no room for it)
  cp .provision/runs/*/report.json up_report.json 2>/dev/null
  rm -rf run .provision
  cd "$ROOT" || exit 1
else
  log "provision: skipped (its dependencies are not importable by $PY; benchmarks/gpu_wheels.sh carries them)"
fi

# 6. The tuning sweeps (issue 9), after the verdict's figures are safely written.
if [[ $MODE == cpu ]]; then
  step tune 90 env PYTHON="$PY" ALLOW_CPU=1 SCALE=test TIME_LIMIT=30 bash "$ROOT/benchmarks/tune_gpu.sh" "$OUT/tune"
else
  step tune 130 env PYTHON="$PY" TIME_LIMIT=90 bash "$ROOT/benchmarks/tune_gpu.sh" "$OUT/tune"
fi

log "done: $( [[ $failed -eq 0 ]] && echo 'every step ran' || echo 'a step FAILED' ); files in $OUT"
exit $failed
