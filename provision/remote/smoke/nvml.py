"""What the smoke job reads from NVML: driver, counts, per-GPU health, and utilization sampling.

nvidia-ml-py (``pynvml``) is optional: without it, or without a loadable driver library, every
reader returns None and the job says so. Every NVML call is guarded on its own, because older
drivers and some GPUs (consumer boards, MIG) answer NOT_SUPPORTED for single queries.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class Nvml:
    """One NVML session. ``Nvml.open()`` returns None (with ``Nvml.why``) when NVML is unusable."""

    why: str | None = None

    def __init__(self, pynvml: Any) -> None:
        self.nv = pynvml

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            import pynvml
        except ImportError:
            cls.why = "nvidia-ml-py is not installed"
            return None
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            cls.why = f"NVML did not start: {exc}"
            return None
        return cls(pynvml)

    def close(self) -> None:
        self._try(self.nv.nvmlShutdown)

    @staticmethod
    def _try(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # NOT_SUPPORTED, FUNCTION_NOT_FOUND (old driver), NO_PERMISSION
            return None

    @staticmethod
    def _text(value: Any) -> str | None:
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def driver_version(self) -> str | None:
        return self._text(self._try(self.nv.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> str | None:
        """The CUDA version the driver supports (12040 -> '12.4')."""
        value = self._try(self.nv.nvmlSystemGetCudaDriverVersion)
        return None if value is None else f"{int(value) // 1000}.{int(value) % 1000 // 10}"

    def count(self) -> int | None:
        value = self._try(self.nv.nvmlDeviceGetCount)
        return None if value is None else int(value)

    def handle(self, index: int) -> Any:
        return self._try(self.nv.nvmlDeviceGetHandleByIndex, index)

    def describe(self, index: int) -> dict[str, Any]:
        h = self.handle(index)
        mem = self._try(self.nv.nvmlDeviceGetMemoryInfo, h)
        cc = self._try(self.nv.nvmlDeviceGetCudaComputeCapability, h)
        return {
            "index": index,
            "name": self._text(self._try(self.nv.nvmlDeviceGetName, h)),
            "uuid": self._text(self._try(self.nv.nvmlDeviceGetUUID, h)),
            "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
            "memory_gib": None if mem is None else round(mem.total / 2**30),
        }

    def throttle_reasons(self, h: Any) -> int | None:
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nv, name, None)
            if fn is not None:
                value = self._try(fn, h)
                if value is not None:
                    return int(value)
        return None

    def pcie_now(self, h: Any) -> tuple[int, int] | None:
        gen = self._try(self.nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        width = self._try(self.nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        return None if gen is None or width is None else (int(gen), int(width))

    def health(self, index: int) -> dict[str, Any]:
        """A snapshot; throttle reasons and the current PCIe link are better read under load
        (see :class:`Sampler`), since an idle link trains down to save power."""
        nv = self.nv
        h = self.handle(index)
        ecc_on = self._try(nv.nvmlDeviceGetEccMode, h)
        ecc = None
        if ecc_on is not None and int(ecc_on[0]) == 1:
            ecc = self._try(
                nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            )
        pending = self._try(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        rows = self._try(nv.nvmlDeviceGetRemappedRows, h)
        now = self.pcie_now(h)
        max_gen = self._try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
        max_width = self._try(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
        persistence = self._try(nv.nvmlDeviceGetPersistenceMode, h)
        slowdown = self._try(nv.nvmlDeviceGetTemperatureThreshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        return {
            "ecc_uncorrected": None if ecc is None else int(ecc),
            "retired_pages_pending": None if pending is None else bool(pending),
            "row_remap": None
            if rows is None
            else {
                "corrected": rows[0],
                "uncorrected": rows[1],
                "pending": bool(rows[2]),
                "failure": bool(rows[3]),
            },
            "throttle_reasons": self.throttle_reasons(h),
            "pcie": None
            if now is None or max_gen is None or max_width is None
            else {
                "cur_gen": now[0],
                "cur_width": now[1],
                "max_gen": int(max_gen),
                "max_width": int(max_width),
                "under_load": False,
            },
            "persistence": None if persistence is None else bool(persistence),
            "temperature_c": self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "temperature_slowdown_c": slowdown,
        }

    def utilization(self, h: Any) -> int | None:
        rates = self._try(self.nv.nvmlDeviceGetUtilizationRates, h)
        return None if rates is None else int(rates.gpu)


class Sampler:
    """Samples NVML every ``period`` seconds in a thread while a workload runs.

    Records GPU utilization of the watched GPUs, the OR of clock-event (throttle) reasons, and the
    best PCIe link seen, because those three mean something only under load.
    """

    def __init__(self, nvml: Nvml, indices: list[int], period: float = 0.1) -> None:
        self.nvml = nvml
        self.handles = {i: nvml.handle(i) for i in indices}
        self.period = period
        self.util: dict[int, list[int]] = {i: [] for i in indices}
        self.reasons: dict[int, int] = {}
        self.pcie: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample_once(self) -> None:
        for i, h in self.handles.items():
            util = self.nvml.utilization(h)
            if util is not None:
                self.util[i].append(util)
            reasons = self.nvml.throttle_reasons(h)
            if reasons is not None:
                self.reasons[i] = self.reasons.get(i, 0) | reasons
            link = self.nvml.pcie_now(h)
            if link is not None and link > self.pcie.get(i, (0, 0)):
                self.pcie[i] = link

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))

    def mean_util(self, index: int) -> float | None:
        samples = self.util.get(index) or []
        return sum(samples) / len(samples) if samples else None

    def merge_into(self, index: int, health: dict[str, Any]) -> None:
        """Put what was seen under load into a health snapshot taken at rest."""
        if index in self.reasons:
            health["throttle_reasons"] = self.reasons[index]
        if index in self.pcie and health.get("pcie"):
            health["pcie"]["cur_gen"], health["pcie"]["cur_width"] = self.pcie[index]
            health["pcie"]["under_load"] = True
