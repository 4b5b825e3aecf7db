"""What a cloud hands the rest of provision: a run's tags, and the results of launch, list and down.

A run is the instances of one launch plus what was made for them, all tagged ``provision:run``
and ``provision:expires-at``; the cloud is the record (``ls`` and ``down`` read the tags). Tags
alone never make a resource provision's: anyone who may tag in the account can write them, so a
resource also has to carry the name provision gave it (:func:`owned_name`, see
:mod:`provision.cloud.aws.listing`).
:class:`Cloud` is what a cloud's client offers (today only :class:`provision.cloud.aws.ec2.Ec2`);
the dataclasses are what it returns and what :mod:`provision.cloud.launcher`,
:mod:`provision.cloud.oneshot` and the ``cloud`` commands read. No cloud SDK is imported here.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from provision.ids import is_run_id

if TYPE_CHECKING:
    from provision.cloud.request import LaunchRequest

TAG_RUN = "provision:run"
TAG_EXPIRES = "provision:expires-at"


def owned_name(run: str) -> str:
    """The name provision gives what it creates for ``run``: its key pair and its security group."""
    return f"provision-{run}"


Say = Callable[[str], None]
# (instance id, address EC2 gave) -> (address, port) to reach it; tests map onto SSH test hosts.
AddressMap = Callable[[str, str], tuple[str, int]]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Attempt:
    instance_type: str
    zone: str
    market: str  # spot | on-demand
    outcome: str  # launched | the AWS error code


@dataclass(frozen=True)
class Launched:
    id: str
    type: str
    zone: str
    market: str
    public_ip: str | None
    private_ip: str | None
    state: str


@dataclass
class LaunchResult:
    run: str
    region: str
    inventory: Path
    run_dir: Path
    instances: list[Launched]
    attempts: list[Attempt]
    host_keys: int
    private_key: Path | None
    expires_at: str
    warnings: list[str] = field(default_factory=list)  # said on stderr before the launch, kept for --json


@dataclass(frozen=True)
class CloudInstance:
    id: str
    run: str
    type: str
    state: str
    zone: str
    market: str
    public_ip: str | None
    private_ip: str | None
    launched: datetime
    expires_at: datetime | None
    usd_per_hour: float | None
    price_source: str | None
    cost_so_far_usd: float | None
    # the launch carried the user data that powers the host off at expires_at (and
    # terminate-on-shutdown): the TTL holds without this controller (see hostttl)
    ttl_on_host: bool = False

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["launched"] = iso(self.launched)
        d["expires_at"] = iso(self.expires_at) if self.expires_at else None
        return d


@dataclass(frozen=True)
class Skipped:
    """A resource tagged ``provision:run`` that provision did not make: reported, never acted on.

    Its tag is not an id provision makes, or it does not carry the name provision gives what it
    creates (the reason says which).
    """

    resource: str  # instance id, security group id or key pair name
    run: str  # the tag's value as Python's repr shows it, cut to 80 characters (it may hold anything)
    reason: str = "not a provision run id"

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        return f"skipped {self.resource} ({TAG_RUN}={self.run}): {self.reason}; left as it is"


@dataclass
class DownResult:
    runs: list[str]
    terminated: list[str]
    security_groups: list[str]
    key_pairs: list[str]
    local_files: list[str]
    skipped: list[Skipped] = field(default_factory=list)


def local_files(workdir: Path, run: str) -> tuple[Path, Path]:
    """The run's private key and inventory under ``workdir``; only for a valid run id."""
    if not is_run_id(run):  # every caller filtered already: this is the last line of defence
        raise ValueError(f"not a run id: {run!r}")
    return workdir / ".provision" / "runs" / run / "id_ed25519", workdir / "inventory" / f"ec2-{run}.yml"


class Cloud(Protocol):
    """One region of one cloud: what a second cloud implements to launch, list and end runs.

    The model is SkyPilot's provisioners (one module per cloud behind one interface, every
    provider error classified, a failed launch tears down what it created): ``launch`` makes a
    whole run or removes what it made, ``listing`` and ``down`` find runs by their tags and act
    only on what the names given at creation show the launch made,
    and ``errors`` turns what the provider's SDK raises into a one-line ProvisionError.
    """

    region: str

    def launch(self, req: LaunchRequest, *, workdir: Path, say: Say) -> LaunchResult: ...

    def listing(self) -> tuple[list[CloudInstance], list[Skipped]]: ...

    def down(
        self,
        *,
        run: str | None = None,
        expired: bool = False,
        all_runs: bool = False,
        workdir: Path | None = None,
        confirm: Callable[[DownResult], None] | None = None,
    ) -> DownResult: ...

    def errors(self, what: str) -> AbstractContextManager[None]: ...
