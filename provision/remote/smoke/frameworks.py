"""TensorFlow and JAX, when installed: the GPU is visible and a matmul runs on it.

Each runs in its own Python process: both grab GPU memory when they start and both are slow to
import, and neither should share a process with the torch measurements.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

_TENSORFLOW = """
import json, tensorflow as tf
for g in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(g, True)
gpus = tf.config.list_physical_devices("GPU")
with tf.device("/GPU:0" if gpus else "/CPU:0"):
    x = tf.ones((512, 512))
    total = float(tf.reduce_sum(tf.linalg.matmul(x, x)))
print(json.dumps({"version": tf.__version__, "gpus": len(gpus), "ok": total == 512.0 ** 3}))
"""

_JAX = """
import json, jax, jax.numpy as jnp
gpus = [d for d in jax.devices() if d.platform == "gpu"]
x = jax.device_put(jnp.ones((512, 512)), gpus[0] if gpus else jax.devices("cpu")[0])
total = float(jnp.dot(x, x).sum())
print(json.dumps({"version": jax.__version__, "gpus": len(gpus), "ok": total == 512.0 ** 3}))
"""

CHECKS = {"tensorflow": _TENSORFLOW, "jax": _JAX}


def installed() -> list[str]:
    return [name for name in CHECKS if importlib.util.find_spec(name) is not None]


def check(name: str, timeout: float = 180.0) -> dict[str, Any]:
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHECKS[name]], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"no answer within {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": f"exit {proc.returncode}: {tail[:300]}"}
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except ValueError:
        return {"ok": False, "error": f"unexpected output: {lines[-1][:200]}"}
    return result
