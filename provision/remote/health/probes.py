"""What provision-health reads from the host: each reader takes its root path or command, so the
tests point it at stand-in files (the proc tree, the kernel log, the package query, the venv).

Standard library only; nothing here judges (check.py does).
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# /proc/driver/nvidia/version's first line, as the proprietary and the open kernel modules print it:
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ..." and
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  ...".
_LOADED = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")
# NVIDIA's Xid line (https://docs.nvidia.com/deploy/xid-errors/): "NVRM: Xid (PCI:0000:3b:00): 79,
# pid=..., GPU has fallen off the bus." (older drivers print the address without "PCI:").
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\): (\d+),")
TIMEOUT_S = 5.0


def loaded_driver(proc: Path) -> str | None:
    """The version of the kernel module that is loaded; None when none is."""
    try:
        text = (proc / "driver" / "nvidia" / "version").read_text(errors="replace")
    except OSError:
        return None
    m = _LOADED.search(text)
    return m.group(1) if m else None


def upstream(version: str) -> str:
    """A Debian or RPM package version without its epoch and revision: ``1:580.95.05-0ubuntu1`` -> ``580.95.05``."""
    return version.split(":", 1)[-1].split("-", 1)[0]


def installed_package(manager: str, package: str, command: str) -> tuple[str | None, str | None]:
    """(version, error): the installed version of ``package`` by ``dpkg-query`` (apt) or ``rpm`` (dnf).

    (None, None): not installed; (None, why): the query could not run (cannot tell).
    """
    argv = (
        [command, "-W", "-f=${db:Status-Abbrev}|${Version}", package]
        if manager == "apt"
        else [command, "-q", "--qf", "ii |%{VERSION}", package]
    )
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{Path(command).name}: {exc}"
    status, _, version = proc.stdout.strip().partition("|")
    if proc.returncode != 0 or not status.startswith("ii") or not version:
        return None, None  # dpkg-query exits 1 for an unknown package; "un"/"rc": removed
    return upstream(version.strip()), None


def unit_state(unit: str, command: str) -> str:
    """``systemctl is-active UNIT``'s answer (active, inactive, failed, ...), or ``unknown: why``."""
    try:
        proc = subprocess.run([command, "is-active", unit], capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown: {exc}"
    return proc.stdout.strip() or f"unknown: exit {proc.returncode}"


@dataclass(frozen=True)
class Xid:
    seq: int
    code: int
    pci: tuple[int, int, int]  # domain, bus, device

    @property
    def address(self) -> str:
        return f"{self.pci[0]:04x}:{self.pci[1]:02x}:{self.pci[2]:02x}"


def pci_key(bus_id: str) -> tuple[int, int, int] | None:
    """NVML's ``00000000:3B:00.0`` or the kernel log's ``0000:3b:00`` as (domain, bus, device)."""
    parts = bus_id.split(".", maxsplit=1)[0].split(":")
    try:
        return (int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)) if len(parts) == 3 else None
    except ValueError:
        return None


def kernel_records(kmsg: Path) -> tuple[list[tuple[int, str]], bool]:
    """(sequence number, message) of every record in the kernel's ring buffer, and whether some
    were overwritten while reading.

    /dev/kmsg (the kernel's documented interface, Documentation/ABI/testing/dev-kmsg): each read()
    returns one record ``prio,seq,timestamp_us,flags;message``; EAGAIN (opened non-blocking) is the
    end; EPIPE says records were overwritten before they were read (the read goes on from the next
    one). A regular file of such lines (a test's stand-in) is read as lines.
    """
    raw: list[bytes] = []
    lost = False
    if kmsg.is_char_device():
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EPIPE:
                        raise
                    lost = True
                    continue
                if not record:  # end of file: a container's /dev/kmsg bound to /dev/null says nothing more
                    break
                raw.append(record)
        finally:
            os.close(fd)
    else:
        raw = kmsg.read_bytes().splitlines()
    out = []
    for record in raw:
        head, _, message = record.decode(errors="replace").partition(";")
        fields = head.split(",")
        if len(fields) >= 2 and fields[1].isdigit():
            out.append((int(fields[1]), message.split("\n", 1)[0]))
    return out, lost


def xids(records: list[tuple[int, str]], after: int) -> list[Xid]:
    """The Xid events among ``records`` with a sequence number above ``after``."""
    out = []
    for seq, message in records:
        if seq <= after or "NVRM: Xid" not in message:
            continue
        m = _XID.search(message)
        if m:
            out.append(Xid(seq, int(m.group(4)), (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16))))
    return out


# --- the venv --------------------------------------------------------------------------------------

_NORMALISE = re.compile(r"[-_.]+")


def normalise(name: str) -> str:
    """PEP 503's normalised project name (dist-info folders use ``_``; locks and METADATA may not)."""
    return _NORMALISE.sub("-", name).lower()


@dataclass
class Distribution:
    name: str
    version: str
    dist_info: Path
    records: list[tuple[str, str, int | None]] = field(default_factory=list)  # path, sha256 (urlsafe b64), size


def site_packages(venv: Path) -> list[Path]:
    return sorted(p for p in (venv / "lib").glob("python*/site-packages") if p.is_dir())


def distributions(venv: Path) -> dict[str, Distribution]:
    """Every ``*.dist-info`` of the venv by normalised name: Name and Version from METADATA's
    headers (read up to the first blank line: the body is the long description), nothing imported."""
    out: dict[str, Distribution] = {}
    for site in site_packages(venv):
        for info in site.glob("*.dist-info"):
            name = version = None
            try:
                with (info / "METADATA").open(encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        if not line.strip():
                            break
                        key, _, value = line.partition(":")
                        if key == "Name":
                            name = value.strip()
                        elif key == "Version":
                            version = value.strip()
            except OSError:
                continue
            if name and version:
                out[normalise(name)] = Distribution(name, version, info)
    return out


def read_record(dist: Distribution) -> str | None:
    """Fill ``dist.records`` from RECORD (PEP 376/627: ``path,sha256=<urlsafe b64, no padding>,size``);
    the error when RECORD cannot be read. Lines are split from the right (the hash and size hold no
    comma); only a quoted path (one with a comma or quote in it) goes through the csv module."""
    try:
        text = (dist.dist_info / "RECORD").read_text(encoding="utf-8")
    except OSError as exc:
        return f"{dist.name}: RECORD unreadable ({exc.strerror})"
    for line in text.splitlines():
        row = next(csv.reader([line])) if line.startswith('"') else line.rsplit(",", 2)
        if len(row) >= 3 and row[1].startswith("sha256="):
            dist.records.append((row[0], row[1][7:], int(row[2]) if row[2].isdigit() else None))
    return None


def record_stat(dist: Distribution) -> list[str]:
    """Files RECORD lists that are missing or of another size (one stat each, on plain strings:
    pathlib's per-path cost is most of the time here on torch's ~15,000 files)."""
    site = f"{dist.dist_info.parent}/"
    bad = []
    for path, _, size in dist.records:
        try:
            have = os.stat(site + path).st_size
        except OSError:
            bad.append(f"{path} missing")
            continue
        if size is not None and have != size:
            bad.append(f"{path} size {have}, recorded {size}")
    return bad


def record_hash(site: Path, path: str, digest: str) -> bool | None:
    """Whether the file's sha256 is RECORD's (None: unreadable)."""
    h = hashlib.sha256()
    try:
        with (site / path).open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() == digest
