"""The compatibility knowledge: ``data/*.yaml`` (every entry sourced) and its typed loader.

``load()`` returns the process-wide :class:`Knowledge`; lookups by user-typed names raise
:class:`provision.errors.BadInput` with the nearest known names as suggestions.
"""

from provision.matrix.consistency import DataError
from provision.matrix.knowledge import Knowledge, load, normalize_pci_id
from provision.matrix.model import (
    CudaToolkit,
    CudnnRelease,
    DriverBranch,
    Gpu,
    InstanceType,
    OsRelease,
    TorchRelease,
    TorchVariant,
    cc_tuple,
)
from provision.matrix.names import normalize

__all__ = [
    "CudaToolkit",
    "CudnnRelease",
    "DataError",
    "DriverBranch",
    "Gpu",
    "InstanceType",
    "Knowledge",
    "OsRelease",
    "TorchRelease",
    "TorchVariant",
    "cc_tuple",
    "load",
    "normalize",
    "normalize_pci_id",
]
