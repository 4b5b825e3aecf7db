"""The result of `provision up` as report.html reads it: ``report.json``'s document, typed.

``provision up`` writes report.json from its own result (:meth:`provision.fleet.records.UpResult.report_json`,
the ``provision.up/1`` document, unchanged); :meth:`UpReport.from_json` reads that document once,
checking each field it keeps, and the page (:mod:`provision.fleet.report`) is rendered from these
records, never from the dict. A host's smoke-job report is the job's own document
(``provision/remote/smoke/job.py``): :class:`VerifyReport` keeps the parts the page shows, typed,
and the document itself for :func:`provision.fleet.verify.failures`, the one reader of its checks'
failure order.

Values the page prints as they came (a duration of ``12`` is shown ``12``, ``12.0`` is ``12.0``)
keep their JSON type: :data:`Scalar`. Reports from before a field existed (no ``locked``, no
``probed``, no loss-curve steps) read as empty or None, and the page says what it knows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from provision.errors import BadInput
from provision.model._json import bad as _bad
from provision.model._json import opt_int as _count
from provision.model._json import opt_text as _text

# a JSON leaf as the smoke job wrote it (a check's value or pass line, a count)
Scalar = str | int | float | bool | None
_HINT = "report.json is written by `provision up` itself: run it again to write a new one"


def _obj(value: object, where: str) -> Mapping[str, Any]:
    """An object; null and absent read as empty (a report without the part)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(where, "an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise _bad(where, "a list")
    return list(value)


def _required_text(d: Mapping[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str):
        raise _bad(f"{where}.{key}", "text")
    return value


def _scalar(value: object, where: str) -> Scalar:
    if value is not None and not isinstance(value, str | int | float | bool):
        raise _bad(where, "a number, text or null")
    return value


def _number(d: Mapping[str, Any], key: str, where: str) -> int | float | None:
    value = d.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _bad(f"{where}.{key}", "a number or null")
    return value


def _numbers(value: object, where: str) -> tuple[float, ...]:
    items = _list(value, where)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in items):
        raise _bad(where, "a list of numbers")
    return tuple(float(v) for v in items)


def _versions(value: object, where: str) -> dict[str, str | None]:
    """Versions by component; a number (torch's cuDNN ``91002``) is read as its text."""
    return {str(k): None if v is None else str(_scalar(v, f"{where}.{k}")) for k, v in _obj(value, where).items()}


@dataclass(frozen=True)
class Check:
    """One check of the smoke job (``provision/remote/smoke/verdict.py``)."""

    name: str
    ok: bool
    gpu: int | str | None = None
    value: Scalar | Mapping[str, Scalar] = None
    unit: str | None = None
    threshold: Scalar | Mapping[str, Scalar] = None
    pass_if: str | None = None  # >=, <=, <, >, =, matches; None in reports of older jobs
    message: str | None = None

    @classmethod
    def from_json(cls, doc: object, where: str = "check") -> Check:
        d = _obj(doc, where)
        gpu = d.get("gpu")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int | str)):
            raise _bad(f"{where}.gpu", "a GPU index or null")
        return cls(
            name=_required_text(d, "name", where),
            ok=bool(d.get("ok")),
            gpu=gpu,
            value=_leaf(d.get("value"), f"{where}.value"),
            unit=_text(d, "unit", where),
            threshold=_leaf(d.get("threshold"), f"{where}.threshold"),
            pass_if=_text(d, "pass_if", where),
            message=_text(d, "message", where),
        )


def _leaf(value: object, where: str) -> Scalar | Mapping[str, Scalar]:
    """A check's value or pass line: a scalar, or one per part (``{"tx": 12.1, "rx": 11.8}``)."""
    if isinstance(value, Mapping):
        return {str(k): _scalar(v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(value, where)


@dataclass(frozen=True)
class Training:
    """The smoke job's training run: the loss per recorded step and the GPU utilization samples."""

    loss_curve: tuple[float, ...] = ()
    loss_curve_steps: tuple[float, ...] | None = None  # None: a job from before steps were recorded
    loss_bound: float | None = None
    gpu_util_series: tuple[float, ...] = ()
    gpu_util_period_s: float | None = None  # None: a job from before the period was recorded

    @classmethod
    def from_json(cls, doc: object, where: str = "training") -> Training:
        d = _obj(doc, where)
        steps = d.get("loss_curve_steps")
        return cls(
            loss_curve=_numbers(d.get("loss_curve"), f"{where}.loss_curve"),
            loss_curve_steps=None if steps is None else _numbers(steps, f"{where}.loss_curve_steps"),
            loss_bound=_number(d, "loss_bound", where),
            gpu_util_series=_numbers(d.get("gpu_util_series"), f"{where}.gpu_util_series"),
            gpu_util_period_s=_number(d, "gpu_util_period_s", where),
        )


@dataclass(frozen=True)
class Gpu:
    """A GPU as the smoke job saw it."""

    name: str | None
    memory_gib: int | float | None = None
    compute_capability: str | None = None

    @classmethod
    def from_json(cls, doc: object, where: str = "gpu") -> Gpu:
        d = _obj(doc, where)
        return cls(
            name=_text(d, "name", where),
            memory_gib=_number(d, "memory_gib", where),
            compute_capability=_text(d, "compute_capability", where),
        )


@dataclass(frozen=True)
class VerifyReport:
    """A host's smoke-job report, the parts the page shows; ``document`` is the job's report as
    read, for :func:`provision.fleet.verify.failures` (the one reader of its checks' order)."""

    document: Mapping[str, Any]
    checks: tuple[Check, ...] = ()
    versions: Mapping[str, str | None] = field(default_factory=dict)  # what the job read on the host
    training: Training = Training()
    gpus: tuple[Gpu, ...] = ()
    counts: Mapping[str, Scalar] = field(default_factory=dict)  # GPUs seen by NVML, lspci, torch
    warnings: tuple[str, ...] = ()
    error: str | None = None  # why the job gave no report (its error's message)

    @classmethod
    def from_json(cls, doc: object, where: str = "verify") -> VerifyReport:
        d = _obj(doc, where)
        counts = _obj(d.get("counts"), f"{where}.counts")
        error = _obj(d.get("error"), f"{where}.error")
        message = error.get("message")
        return cls(
            document=d,
            checks=tuple(
                Check.from_json(c, f"{where}.checks[{i}]")
                for i, c in enumerate(_list(d.get("checks"), f"{where}.checks"))
            ),
            versions=_versions(d.get("versions"), f"{where}.versions"),
            training=Training.from_json(d.get("training"), f"{where}.training"),
            gpus=tuple(
                Gpu.from_json(g, f"{where}.gpus[{i}]") for i, g in enumerate(_list(d.get("gpus"), f"{where}.gpus"))
            ),
            counts={str(k): _scalar(v, f"{where}.counts.{k}") for k, v in counts.items()},
            warnings=tuple(
                str(_obj(w, f"{where}.warnings[{i}]").get("message"))
                for i, w in enumerate(_list(d.get("warnings"), f"{where}.warnings"))
            ),
            error=None if message is None else str(message),
        )


@dataclass(frozen=True)
class Probed:
    """What the probe found on the host before the run (:class:`provision.fleet.planning.HostPlan`'s
    ``present``)."""

    os: str | None = None
    gpu_count: int = 0
    driver: str | None = None
    cuda_toolkits: tuple[str, ...] = ()
    frameworks: Mapping[str, str | None] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: object, where: str = "probed") -> Probed:
        d = _obj(doc, where)
        count = d.get("gpu_count", 0)
        if isinstance(count, bool) or not isinstance(count, int):
            raise _bad(f"{where}.gpu_count", "a count")
        toolkits = _list(d.get("cuda_toolkits"), f"{where}.cuda_toolkits")
        if not all(isinstance(t, str) for t in toolkits):
            raise _bad(f"{where}.cuda_toolkits", "a list of text")
        driver = _scalar(d.get("driver"), f"{where}.driver")
        return cls(
            os=_text(d, "os", where),
            gpu_count=count,
            driver=None if driver is None else str(driver),
            cuda_toolkits=tuple(toolkits),
            frameworks=_versions(d.get("frameworks"), f"{where}.frameworks"),
        )


@dataclass(frozen=True)
class HostDetail:
    """One host of the run (:meth:`provision.fleet.records.HostRun.detail_json`)."""

    host: str
    group: str | None = None
    verdict: str | None = None
    message: str | None = None
    failed_task: str | None = None
    changed: int | None = None
    reboots: int | None = None
    duration_s: int | float | None = None
    converged: bool = False
    cpu_only_check: bool = False
    changes: tuple[str, ...] = ()
    role_seconds: Mapping[str, float] = field(default_factory=dict)
    locked: Mapping[str, str | None] = field(default_factory=dict)  # the lock group, flat
    probed: Probed | None = None  # None: never probed (or a report from before this field)
    verify: VerifyReport | None = None  # None: the smoke job did not run (or left nothing)
    lock_hash: str | None = None
    rolled_back_from: str | None = None  # `provision rollback`: the lock hash the host ran before

    @classmethod
    def from_json(cls, doc: object, where: str = "detail") -> HostDetail:
        d = _obj(doc, where)
        seconds = _obj(d.get("role_seconds"), f"{where}.role_seconds")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in seconds.values()):
            raise _bad(f"{where}.role_seconds", "seconds per role")
        changes = _list(d.get("changes"), f"{where}.changes")
        probed, verify = d.get("probed"), d.get("verify")
        return cls(
            host=_required_text(d, "host", where),
            group=_text(d, "group", where),
            verdict=_text(d, "verdict", where),
            message=_text(d, "message", where),
            failed_task=_text(d, "failed_task", where),
            changed=_count(d, "changed", where),
            reboots=_count(d, "reboots", where),
            duration_s=_number(d, "duration_s", where),
            converged=bool(d.get("converged")),
            cpu_only_check=bool(d.get("cpu_only_check")),
            changes=tuple(str(c) for c in changes),
            role_seconds={str(k): float(v) for k, v in seconds.items()},
            locked=_versions(d.get("locked"), f"{where}.locked"),
            # an empty object is what a host the probe never reached has: no facts
            probed=Probed.from_json(probed, f"{where}.probed") if probed else None,
            verify=VerifyReport.from_json(verify, f"{where}.verify") if verify else None,
            lock_hash=_text(d, "lock_hash", where),
            rolled_back_from=_text(d, "rolled_back_from", where),
        )


@dataclass(frozen=True)
class CacheSummary:
    """What the fleet cache did (:class:`provision.fleet.cache.run.CacheReport`'s ``to_json``)."""

    apt: str | None = None  # on | off | why it is off
    wheels: Mapping[str, str] = field(default_factory=dict)  # wheelhouse key -> on | why not
    hosts: tuple[str, ...] = ()
    requests: int = 0  # squid's
    hits: int = 0
    served_bytes: int = 0  # squid's and the wheelhouse's, to the hosts
    upstream_bytes: int = 0
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, doc: object, where: str = "cache") -> CacheSummary:
        d = _obj(doc, where)
        proxy = _obj(d.get("proxy"), f"{where}.proxy")
        hosts = _list(d.get("hosts"), f"{where}.hosts")
        return cls(
            apt=None if d.get("apt") is None else str(d.get("apt")),
            wheels={str(k): str(v) for k, v in _obj(d.get("wheels"), f"{where}.wheels").items()},
            hosts=tuple(str(h) for h in hosts),
            requests=_count(proxy, "requests", f"{where}.proxy") or 0,
            hits=_count(proxy, "hits", f"{where}.proxy") or 0,
            served_bytes=(_count(proxy, "served_bytes", f"{where}.proxy") or 0)
            + (_count(d, "wheels_served_bytes", where) or 0),
            upstream_bytes=_count(d, "upstream_bytes", where) or 0,
            notes=tuple(str(n) for n in _list(d.get("notes"), f"{where}.notes")),
        )


@dataclass(frozen=True)
class UpReport:
    """A run of `provision up`: report.json's ``provision.up/1`` document, read once."""

    run: str | None
    ok: bool = False
    check: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    stopped_after_batch: int | None = None  # --serial: the batch that did not pass
    interrupted: bool = False  # Ctrl-C
    cache: CacheSummary | None = None  # None: no fleet cache in this run
    details: tuple[HostDetail, ...] = ()

    @classmethod
    def from_json(cls, doc: object, where: str = "report.json") -> UpReport:
        """The record; a field of the wrong type is BadInput naming it (the model's readers' hint
        is the lock's, replaced here by report.json's own)."""
        try:
            return cls._read(doc, where)
        except BadInput as exc:
            raise BadInput(exc.message, _HINT) from None

    @classmethod
    def _read(cls, doc: object, where: str) -> UpReport:
        d = _obj(doc, where)
        run = d.get("run")
        cache = d.get("cache")
        details = _list(d.get("details"), f"{where}.details")
        started, finished = _number(d, "started_at", where), _number(d, "finished_at", where)
        return cls(
            run=None if run is None else str(run),
            ok=bool(d.get("ok")),
            check=bool(d.get("check")),
            started_at=None if started is None else float(started),
            finished_at=None if finished is None else float(finished),
            stopped_after_batch=_count(d, "stopped_after_batch", where),
            interrupted=bool(d.get("interrupted")),
            cache=CacheSummary.from_json(cache, f"{where}.cache") if cache else None,
            details=tuple(HostDetail.from_json(h, f"{where}.details[{i}]") for i, h in enumerate(details)),
        )
