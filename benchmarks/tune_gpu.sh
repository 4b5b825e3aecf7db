#!/usr/bin/env bash
# `provision tune` on this machine's GPU: the tuning part of the H200 check (benchmarks/gpu_check.sh
# calls it). Safe on a single GPU with no network: it runs the stand-alone tuning job (standard
# library + torch, nvidia-ml-py when installed), writes only under OUT_DIR, and ends itself within
# TIME_LIMIT seconds (the job shortens its sweeps to fit; `timeout` is the backstop).
#
# Usage: benchmarks/tune_gpu.sh [OUT_DIR]
#   OUT_DIR     where tune.json, tune.log, tune.md (and tune.png) go [${TMPDIR:-/tmp}/provision-tune]
#   PYTHON      interpreter with torch [.venv/bin/python, else python3]
#   TIME_LIMIT  seconds for the job [80]
#   ALLOW_CPU=1 measure on the CPU when there is no GPU (to try the script without one)
#   SCALE       gpu | cpu | test (default: the job's choice for the device)
# Exit status: the job's (0 measured, 1 no GPU or failed), 124 when it ran past the limit.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${TMPDIR:-/tmp}/provision-tune}
mkdir -p "$out"
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ]; then py=$root/.venv/bin/python; else py=python3; fi
fi
limit=${TIME_LIMIT:-80}
args=(--time-limit "$limit")
[ "${ALLOW_CPU:-0}" = 1 ] && args+=(--allow-cpu)
[ -n "${SCALE:-}" ] && args+=(--scale "$SCALE")

started=$(date +%s)
timeout --kill-after=10 $((limit + 20)) "$py" "$root/provision/remote/tune_job.py" "${args[@]}" \
  >"$out/tune.json" 2>"$out/tune.log"
rc=$?
echo "tune_gpu: job exit $rc after $(($(date +%s) - started))s; results in $out" >&2
if [ "$rc" -ne 0 ]; then
  tail -n 5 "$out/tune.log" >&2
  head -c 2000 "$out/tune.json" >&2
  exit "$rc"
fi

# The results table (Markdown, for the docs) from the JSON, with the standard library only.
"$py" - "$out/tune.json" >"$out/tune.md" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
def pct(v): return "-" if v is None else f"{v:.0f}%"
print(f"tune on {d['device_name']} ({d['device']}), torch {d['torch']}, {d['cpu_count']} CPUs, {d['duration_s']} s\n")
print("| batch | samples/s | memory GiB | GPU util |\n|---:|---:|---:|---:|")
for r in d["batch_sizes"]:
    star = " (sweet spot)" if r["batch_size"] == d["best_batch_size"] else ""
    mem = "-" if r["memory_gib"] is None else f"{r['memory_gib']:.2f}"
    print(f"| {r['batch_size']}{star} | {r['samples_per_s']:,.0f} | {mem} | {pct(r['gpu_util_pct'])} |")
print(f"\nsweep ended by: {d['batch_sweep_stopped']}\n")
print(f"| workers (batch {d['workers_batch_size']}) | pinned | samples/s | waiting for data | GPU util |")
print("|---:|---|---:|---:|---:|")
for w in d["workers"]:
    print(f"| {w['workers']} | {'yes' if w['pin_memory'] else 'no'} | {w['samples_per_s']:,.0f} | "
          f"{w['data_wait_pct']:.0f}% | {pct(w['gpu_util_pct'])} |")
a, c, g = d["amp"], d["channels_last"], d["grouped_conv"]
print(f"\n| comparison | speed-up |\n|---|---:|")
print(f"| autocast {a['dtype']} / fp32 | {a['speedup']}x |")
print(f"| channels_last / contiguous | {c['speedup']}x |")
print(f"| grouped conv (groups={g['groups']}) / standard, {g['params_ratio']}x params | {g['speedup']}x |")
print()
for r in d["recommendations"]:
    print(f"- {r['advice']}")
EOF
cat "$out/tune.md"

# The plot, where provision and matplotlib are importable (optional: the host may lack both).
if "$py" -c "import matplotlib, provision.advise.plot" 2>/dev/null; then
  "$py" -c "import json, sys; from pathlib import Path; from provision.advise.plot import tune_plot; \
tune_plot(Path(sys.argv[2]), json.load(open(sys.argv[1])))" "$out/tune.json" "$out/tune.png" \
    && echo "tune_gpu: plot $out/tune.png" >&2
fi
exit 0
