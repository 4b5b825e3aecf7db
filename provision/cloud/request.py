"""What ``cloud up`` was asked for, checked before any AWS call: types, count, TTL, CIDR, image.

Everything here is pure (the knowledge data and the arguments), so bad input is refused with
exit 2 before a single resource exists.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from provision.cloud.aws.images import ImageQuery, check_query, ec2_arch
from provision.errors import BadInput
from provision.matrix import load

_TTL_PART = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL = timedelta(days=30)
MIN_ROOT_GIB = 100


def parse_ttl(text: str) -> timedelta:
    """``90m``, ``8h``, ``1d12h`` -> timedelta; anything else is bad input."""
    t = text.strip().lower()
    if not t or _TTL_PART.sub("", t) != "":
        raise BadInput(f"malformed --ttl `{text}`", "give a duration like 30m, 8h, 2d or 1h30m")
    seconds = sum(int(n) * _UNITS[u] for n, u in _TTL_PART.findall(t))
    ttl = timedelta(seconds=seconds)
    if ttl <= timedelta(0) or ttl > MAX_TTL:
        raise BadInput(f"--ttl {text} is out of range", "give a duration above 0 and at most 30d")
    return ttl


def parse_cidr(text: str) -> str:
    """A network in CIDR form (host bits must be zero; a bare address means /32 or /128)."""
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise BadInput(
            f"malformed --ssh-cidr `{text}`: {exc}",
            "give a network in CIDR form, e.g. 203.0.113.7/32 for one address",
        ) from exc
    return str(net)


# Wider than this is warned about (and asked, see `cloud up`) like /0: no one person's address is
# in a range that wide. An IPv4 /8 is the unit IANA allocates whole (IANA IPv4 Address Space
# Registry, https://www.iana.org/assignments/ipv4-address-space/); for IPv6, /16 (issue 25).
WIDEST_QUIET_PREFIX = {4: 8, 6: 16}


def cidr_warnings(cidr: str) -> list[str]:
    """What a checked ``--ssh-cidr`` opens that the user should hear about (it is still allowed)."""
    net = ipaddress.ip_network(cidr)
    if net.prefixlen >= WIDEST_QUIET_PREFIX[net.version]:
        return []
    if net.prefixlen == 0:
        world = "the whole internet" if net.version == 4 else "the whole IPv6 internet"
    else:
        wide = f"/{WIDEST_QUIET_PREFIX[net.version]}"
        world = f"2^{net.max_prefixlen - net.prefixlen} addresses (a range wider than {wide}, not one network of yours)"
    return [
        f"--ssh-cidr {cidr} opens port 22 (SSH) of every instance of this run to {world}; "
        "give your own address instead, e.g. --ssh-cidr 203.0.113.7/32"
    ]


@dataclass(frozen=True)
class TypeChoice:
    name: str
    gpu: str
    gpu_count: int
    arch: str  # EC2 spelling: x86_64 | arm64
    usd_per_hour: float | None  # on-demand, from the knowledge data
    price_read: str | None


def describe_type(name: str) -> TypeChoice:
    """A type from the knowledge data; a type it does not list has no NVIDIA GPU we know of."""

    k = load()
    try:
        it = k.instance_type(name)
    except BadInput as exc:
        raise BadInput(
            f"`{name}` is not an EC2 instance type with NVIDIA GPUs",
            "pick a GPU type such as g4dn, g5, g6, g6e, p4d, p5, or use --gpu NAME --gpu-count N",
            suggestions=exc.suggestions,
        ) from exc
    return TypeChoice(
        name=it.name,
        gpu=it.gpu.name,
        gpu_count=it.gpu_count,
        arch=ec2_arch(it.arch),
        usd_per_hour=it.price.usd_per_hour if it.price else None,
        price_read=it.price.read if it.price else None,
    )


def types_for_gpu(gpu: str, count: int) -> list[TypeChoice]:
    """Every type with at least ``count`` GPUs of that model, cheapest first.

    Types whose price the data lacks come after the priced ones (fewest GPUs first), so the
    fallback order never puts an unknown cost ahead of a known, cheaper one.
    """

    k = load()
    model = k.gpu(gpu).name
    fits = [describe_type(it.name) for it in k.instance_types if it.gpu.name == model and it.gpu_count >= count]
    if not fits:
        have = sorted({it.gpu.name for it in k.instance_types})
        raise BadInput(
            f"no EC2 instance type has {count} x {model}",
            f"EC2 offers: {', '.join(have)}; lower --gpu-count or pick another --gpu",
            suggestions=have,
        )
    return sorted(
        fits,
        key=lambda t: (t.usd_per_hour is None, t.usd_per_hour or 0.0, t.gpu_count, t.name),
    )


@dataclass(frozen=True)
class LaunchRequest:
    run: str
    region: str
    types: tuple[TypeChoice, ...]  # the fallback order
    count: int
    ttl: timedelta
    ssh_cidr: str
    image: ImageQuery | None  # None when --ami is given
    ami: str | None
    spot: bool = False
    on_demand_fallback: bool = False
    ssh_public_key: Path | None = None  # None: create a key pair, private key into the run dir
    max_hourly_usd: float | None = None
    keep_on_failure: bool = False
    wait_ssh: bool = True
    ssh_address: str = "public"  # public | private
    root_gib: int = MIN_ROOT_GIB
    os_id: str = "ubuntu-24.04"
    base: str = "os"  # os | dlami (NVIDIA's driver already in the image; also with --ami)
    tags: dict[str, str] = field(default_factory=dict)


def build_types(instance_types: str | None, gpu: str | None, gpus: int | None) -> list[TypeChoice]:
    if instance_types and gpu:
        raise BadInput("give --instance-type or --gpu, not both", "drop one of them")
    if instance_types:
        names = [n.strip() for n in instance_types.split(",") if n.strip()]
        if not names:
            raise BadInput("empty --instance-type", "give e.g. --instance-type g5.xlarge,g6.xlarge")
        return [describe_type(n) for n in dict.fromkeys(names)]
    if gpu:
        if gpus is not None and gpus < 1:
            raise BadInput(f"--gpu-count {gpus} is not a GPU count", "give --gpu-count 1 or more")
        return types_for_gpu(gpu, gpus or 1)
    if gpus is not None:
        raise BadInput("--gpu-count needs --gpu NAME", "e.g. --gpu A10G --gpu-count 1")
    raise BadInput("no instance type given", "pass --instance-type T[,T2...] or --gpu NAME [--gpu-count N]")


def check_budget(types: list[TypeChoice], count: int, limit: float | None) -> list[TypeChoice]:
    """Drop types above ``--max-hourly-usd`` (the whole launch: count x on-demand price).

    A type whose price the data lacks cannot be checked, so it is dropped too; spot is judged by
    the on-demand price (the ceiling a spot price never exceeds).
    """
    if limit is None:
        return types
    if limit <= 0:
        raise BadInput(f"--max-hourly-usd {limit} is not a budget", "give a positive number of dollars")
    kept = [t for t in types if t.usd_per_hour is not None and t.usd_per_hour * count <= limit]
    if not kept:

        def show(t: TypeChoice) -> str:
            return f"{t.name} {'unknown' if t.usd_per_hour is None else f'${t.usd_per_hour * count:.2f}/h'}"

        raise BadInput(
            f"every candidate costs more than --max-hourly-usd {limit:g} (" + "; ".join(show(t) for t in types) + ")",
            "raise --max-hourly-usd, lower --count, or pick a smaller type",
        )
    return kept


def image_request(ami: str | None, os_id: str, base: str, arch: str) -> ImageQuery | None:
    if ami is not None:
        if not re.fullmatch(r"ami-[0-9a-f]{8,17}", ami):
            raise BadInput(f"malformed --ami `{ami}`", "an AMI id looks like ami-0abc1234def567890")
        return None
    q = ImageQuery(os=os_id, arch=arch, base=base)
    check_query(q)
    return q
