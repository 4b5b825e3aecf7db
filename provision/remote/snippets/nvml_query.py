"""NVML inventory, run ON the target by `provision probe` with only the standard library.

Prefers pynvml (nvidia-ml-py) when the target's Python has it, else talks to libnvidia-ml.so.1
through ctypes. Prints one JSON object: {"available": false} when there is no NVML library,
{"error": "..."} when NVML is there but fails (e.g. "Driver Not Loaded"), else the inventory.
Never imports the provision package: this file is sent to the host as text.
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any


def _pci_id(device_id: int) -> str:
    # NVML packs the PCI device ID as (device << 16) | vendor.
    return f"{device_id & 0xFFFF:04x}:{(device_id >> 16) & 0xFFFF:04x}"


def _cuda(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def via_pynvml() -> dict[str, Any]:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"available": True, "error": str(exc)}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            gpu: dict[str, Any] = {
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                "memory_mib": int(pynvml.nvmlDeviceGetMemoryInfo(h).total) >> 20,
                "compute_capability": f"{major}.{minor}",
            }
            try:
                pci = pynvml.nvmlDeviceGetPciInfo(h)
                bus = pci.busId
                gpu["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else bus
                gpu["pci_id"] = _pci_id(pci.pciDeviceId)
            except pynvml.NVMLError:  # older drivers and stand-ins lack it; the rest still counts
                pass
            gpus.append(gpu)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {
            "available": True,
            "via": "pynvml",
            "driver_version": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_version": _cuda(pynvml.nvmlSystemGetCudaDriverVersion()),
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


# nvmlPciInfo_t (v3); provision/remote/health/nvml.py declares it too (why: see there).
class _Pci(ctypes.Structure):
    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


def via_ctypes() -> dict[str, Any]:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return {"available": False}
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def err(rc: int) -> str:
        return str(lib.nvmlErrorString(rc).decode())

    rc = lib.nvmlInit_v2()
    if rc != 0:
        return {"available": True, "error": err(rc)}
    try:
        count = ctypes.c_uint()
        lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        gpus = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0:
                continue
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetName(h, name, 96)
            lib.nvmlDeviceGetUUID(h, uuid, 96)
            mem = _Memory()
            lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem))
            major, minor = ctypes.c_int(), ctypes.c_int()
            lib.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(major), ctypes.byref(minor))
            gpu: dict[str, Any] = {
                "index": i,
                "name": name.value.decode(),
                "uuid": uuid.value.decode(),
                "memory_mib": mem.total >> 20,
                "compute_capability": f"{major.value}.{minor.value}",
            }
            pci = _Pci()
            get_pci = getattr(lib, "nvmlDeviceGetPciInfo_v3", None)
            if get_pci is not None and get_pci(h, ctypes.byref(pci)) == 0:
                gpu["pci_bus_id"] = pci.busId.decode()
                gpu["pci_id"] = _pci_id(pci.pciDeviceId)
            gpus.append(gpu)
        driver = ctypes.create_string_buffer(96)
        lib.nvmlSystemGetDriverVersion(driver, 96)
        cuda = ctypes.c_int()
        lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(cuda))
        return {
            "available": True,
            "via": "nvml",
            "driver_version": driver.value.decode(),
            "cuda_version": _cuda(cuda.value),
            "gpus": gpus,
        }
    finally:
        lib.nvmlShutdown()


def main() -> None:
    result: dict[str, Any] | None = None
    if os.environ.get("PROVISION_NVML_VIA") != "ctypes":
        try:
            import pynvml  # noqa: F401
        except ImportError:
            pass
        else:
            try:
                result = via_pynvml()
            except Exception as exc:  # pynvml could not load the library: same as ctypes failing
                result = {"available": False} if "Library Not Found" in str(exc) else {"error": str(exc)}
    if result is None:
        result = via_ctypes()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
