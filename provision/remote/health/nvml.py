"""What provision-health reads from NVML, through ctypes (standard library only: no pynvml).

The host's ``libnvidia-ml.so.1`` is the driver's own library; without it (no driver installed)
:func:`read` answers ``{"available": False}``. Each query is guarded on its own: older drivers and
some GPUs answer NOT_SUPPORTED (3) for single queries, which reads as None ("not known"), never as
healthy or unhealthy. The signatures are NVML's (nvml.h): ``nvmlDeviceGetTotalEccErrors(device,
NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, &count)``,
``nvmlDeviceGetRetiredPagesPendingStatus(device, &isPending)``,
``nvmlDeviceGetRemappedRows(device, &corr, &unc, &isPending, &failureOccurred)``,
``nvmlDeviceGetPersistenceMode(device, &mode)``.
"""

from __future__ import annotations

import ctypes
from typing import Any

UNCORRECTED = 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE = 0  # NVML_VOLATILE_ECC: since the driver loaded


# nvmlPciInfo_t (v3). provision/remote/snippets/nvml_query.py declares the same structure and the
# two are not shared on purpose: that snippet is sent to a host as ONE text (run by `python3 -`
# from probe.sh, before anything is installed) and can import nothing beside it, while this file is
# installed as part of a package folder. tests/unit/remote/test_health_check.py pins the two equal.
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


def _call(lib: Any, name: str, *args: Any) -> bool:
    fn = getattr(lib, name, None)
    return fn is not None and fn(*args) == 0


def _uint(lib: Any, name: str, h: Any) -> int | None:
    out = ctypes.c_uint()
    return int(out.value) if _call(lib, name, h, ctypes.byref(out)) else None


def _gpu(lib: Any, i: int) -> dict[str, Any]:
    h = ctypes.c_void_p()
    if not _call(lib, "nvmlDeviceGetHandleByIndex_v2", i, ctypes.byref(h)):
        return {"index": i, "name": None}
    name = ctypes.create_string_buffer(96)
    named = _call(lib, "nvmlDeviceGetName", h, name, 96)
    gpu: dict[str, Any] = {"index": i, "name": name.value.decode() if named else None}
    pci = _Pci()
    gpu["pci_bus_id"] = pci.busId.decode() if _call(lib, "nvmlDeviceGetPciInfo_v3", h, ctypes.byref(pci)) else None
    cur, pend = ctypes.c_int(), ctypes.c_int()
    ecc_on = _call(lib, "nvmlDeviceGetEccMode", h, ctypes.byref(cur), ctypes.byref(pend)) and cur.value == 1
    count = ctypes.c_ulonglong()
    gpu["ecc_uncorrected"] = (
        int(count.value)
        if ecc_on and _call(lib, "nvmlDeviceGetTotalEccErrors", h, UNCORRECTED, VOLATILE, ctypes.byref(count))
        else None
    )
    pending = _uint(lib, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    gpu["retired_pages_pending"] = None if pending is None else bool(pending)
    rows = [ctypes.c_uint() for _ in range(4)]
    if _call(lib, "nvmlDeviceGetRemappedRows", h, *(ctypes.byref(r) for r in rows)):
        gpu["row_remap_pending"], gpu["row_remap_failure"] = bool(rows[2].value), bool(rows[3].value)
    else:
        gpu["row_remap_pending"] = gpu["row_remap_failure"] = None
    mode = _uint(lib, "nvmlDeviceGetPersistenceMode", h)
    gpu["persistence"] = None if mode is None else bool(mode)
    return gpu


def read(library: str = "libnvidia-ml.so.1") -> dict[str, Any]:
    """``{"available": False}``; ``{"available": True, "error": "Driver Not Loaded"}``; or the GPUs."""
    try:
        lib = ctypes.CDLL(library)
    except OSError:
        return {"available": False}
    lib.nvmlErrorString.restype = ctypes.c_char_p
    rc = lib.nvmlInit_v2()
    if rc != 0:
        return {"available": True, "error": str(lib.nvmlErrorString(rc).decode())}
    try:
        count = ctypes.c_uint()
        if not _call(lib, "nvmlDeviceGetCount_v2", ctypes.byref(count)):
            return {"available": True, "error": "nvmlDeviceGetCount failed"}
        return {"available": True, "gpus": [_gpu(lib, i) for i in range(count.value)]}
    finally:
        lib.nvmlShutdown()
