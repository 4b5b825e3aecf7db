"""From the launch options to a running, inventoried run: what ``cloud up`` and ``up --cloud`` share.

:class:`LaunchArgs` is what the user typed (the option block both commands declare),
:func:`prepare` checks all of it and opens boto3's session without sending a request (bad input
is exit 2 before anything exists), and :func:`launch` hands the checked request to the
:class:`~provision.cloud.interface.Cloud` client. :func:`connect` (a launch) and
:func:`open_region` (``ls``, ``down``) are the only places a client is built (today always
:class:`provision.cloud.aws.ec2.Ec2`), so tests can put theirs (address mapping onto SSH test
hosts) in its place.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.errors import BadInput
from provision.errors import signals_as_interrupt as end_signals

if TYPE_CHECKING:
    from provision.cloud.interface import Cloud, LaunchResult, Say
    from provision.cloud.request import LaunchRequest

DEFAULT_KEY = "~/.ssh/id_ed25519.pub"


@dataclass(frozen=True)
class LaunchArgs:
    """The launch options as given on the command line (defaults as the option block sets them)."""

    instance_type: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    count: int = 1
    region: str | None = None
    spot: bool = False
    on_demand_fallback: bool = False
    ttl: str = "8h"
    ssh_cidr: str | None = None
    ssh_key: str | None = None
    new_key: bool = False
    ami: str | None = None
    os_name: str | None = None
    base: str = "os"
    root_gib: int = 100
    max_hourly_usd: float | None = None
    keep_on_failure: bool = False
    ssh_address: str = "public"
    # the options the user typed (not defaults): `up` refuses them without --cloud
    given: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Prepared:
    """A checked launch: nothing has been sent to AWS yet."""

    session: Any
    request: LaunchRequest

    @property
    def run(self) -> str:
        return self.request.run

    @property
    def warnings(self) -> list[str]:
        """What the launch allows but the user should hear about before it starts (stderr)."""
        from provision.cloud.request import cidr_warnings  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.request)

        return cidr_warnings(self.request.ssh_cidr)


def prepare(args: LaunchArgs, *, wait_ssh: bool = True) -> Prepared:
    """Check every launch option and open the session; raises BadInput (exit 2) on bad input.

    Only local data is read (the knowledge data, the key file, boto3's configuration), so a
    refused launch has created nothing and sent nothing.
    """
    from provision.cloud import request as rq  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.request)
    from provision.cloud.aws.images import normalize_os  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.aws.images)
    from provision.matrix import load  # noqa: PLC0415 (start-up: `provision cloud --help` loads this module, not matrix)

    if args.count < 1:
        raise BadInput(f"--count {args.count} launches nothing", "give --count 1 or more")
    if args.on_demand_fallback and not args.spot:
        raise BadInput("--on-demand-fallback needs --spot", "add --spot, or drop --on-demand-fallback")
    if args.new_key and args.ssh_key:
        raise BadInput("give --ssh-key or --new-key, not both", "drop one of them")
    if args.root_gib < rq.MIN_ROOT_GIB:
        raise BadInput(f"--root-gib {args.root_gib} is below {rq.MIN_ROOT_GIB}", "drivers, CUDA and wheels need room")
    ttl = rq.parse_ttl(args.ttl)
    if not args.ssh_cidr:
        raise BadInput(
            "--ssh-cidr is required (port 22 is never opened to the world by default)",
            "give your address, e.g. --ssh-cidr $(curl -s https://checkip.amazonaws.com)/32",
        )
    cidr = rq.parse_cidr(args.ssh_cidr)
    types = rq.build_types(args.instance_type, args.gpu, args.gpus)
    types = rq.check_budget(types, args.count, args.max_hourly_usd)
    os_id = normalize_os(args.os_name or load().t.default_os)
    # One query checks the --os/--base pair; the launch asks again per architecture of the types.
    image = rq.image_request(args.ami, os_id, args.base, types[0].arch)
    pub = public_key(args.ssh_key, args.new_key)

    from provision.cloud.aws.session import open_session  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.aws.session)
    from provision.ids import new_run_id  # noqa: PLC0415 (start-up: `provision --help` loads this module, not ids)

    session, region = open_session(args.region)
    req = rq.LaunchRequest(
        run=new_run_id(),
        region=region,
        types=tuple(types),
        count=args.count,
        ttl=ttl,
        ssh_cidr=cidr,
        image=image,
        ami=args.ami,
        spot=args.spot,
        on_demand_fallback=args.on_demand_fallback,
        ssh_public_key=pub,
        max_hourly_usd=args.max_hourly_usd,
        keep_on_failure=args.keep_on_failure,
        wait_ssh=wait_ssh,
        ssh_address=args.ssh_address,
        root_gib=args.root_gib,
        os_id=os_id,
        base=args.base,
    )
    return Prepared(session, req)


def public_key(ssh_key: str | None, new_key: bool) -> Path | None:
    """The public key to import, or None for a new key pair (private key into the run dir)."""
    if new_key:
        return None
    path = Path(os.path.expanduser(ssh_key or DEFAULT_KEY))
    if path.is_file():
        text = path.read_text(errors="replace")
        if "PRIVATE KEY" in text:
            raise BadInput(f"{path} is a private key", "give the .pub file to --ssh-key")
        why = public_key_problem(text)
        if why:
            raise BadInput(
                f"{path} is not a key EC2 can import: {why}",
                "give an RSA or ED25519 public key (ssh-keygen -t ed25519), or use --new-key",
            )
        return path
    if ssh_key:
        raise BadInput(f"--ssh-key {ssh_key}: no such file", "give a public key file, or use --new-key")
    return None  # no default key: a new key pair, private key in the run dir


# ImportKeyPair takes RSA and ED25519 keys only (EC2 API reference); OpenSSH's one-line form is
# what ssh-keygen writes. Checked here so that a wrong file is bad input before any AWS call.
_EC2_KEY_TYPES = ("ssh-ed25519", "ssh-rsa")


def public_key_problem(text: str) -> str | None:
    """Why ``text`` is not an OpenSSH RSA/ED25519 public key line, or None when it is one."""
    import base64  # noqa: PLC0415 (start-up: `provision --help` loads this module, and base64 only this path)
    import binascii  # noqa: PLC0415 (start-up: `provision --help` loads this module, and binascii only this path)

    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(lines) != 1:
        return f"{len(lines)} key lines, not one"
    fields = lines[0].split()
    if len(fields) < 2:
        return "not `TYPE BASE64 [COMMENT]`"
    kind, blob = fields[0], fields[1]
    if kind not in _EC2_KEY_TYPES:
        return f"key type `{kind[:40]}`, not {' or '.join(_EC2_KEY_TYPES)}"
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "the key is not base64"
    # the blob starts with its own type as an SSH string: a 4-byte length, then the name
    if raw[4 : 4 + int.from_bytes(raw[:4], "big")] != kind.encode():
        return f"the key's data is not a {kind} key"
    return None


def connect(prepared: Prepared) -> Cloud:
    """The EC2 client for the run's region (the seam tests replace to map addresses)."""
    from provision.cloud.aws.ec2 import Ec2  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.aws.ec2)

    return Ec2(prepared.session, prepared.request.region)


def open_region(region: str | None) -> Cloud:
    """The client of ``region`` (or the configured one) for ``ls`` and ``down``; BadInput without one."""
    from provision.cloud.aws.ec2 import Ec2  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.aws.ec2)
    from provision.cloud.aws.session import open_session  # noqa: PLC0415 (start-up: `provision --help` loads this module, not cloud.aws.session)

    session, name = open_session(region)
    return Ec2(session, name)


def describe(req: LaunchRequest) -> str:
    """One line for the user: what is about to be launched, where, and at what price."""
    first = req.types[0]
    price = (
        f", on-demand ${first.usd_per_hour * req.count:.2f}/h for {req.count} x {first.name}"
        if first.usd_per_hour is not None
        else ""
    )
    return (
        f"run {req.run}: {req.count} x {' | '.join(t.name for t in req.types)} in {req.region}"
        + (" (spot)" if req.spot else "")
        + price
    )


def launch(prepared: Prepared, cloud: Cloud, say: Say, workdir: Path | None = None) -> LaunchResult:
    """Launch the run and write its inventory; a launch that fails part way removes what it made."""
    with cloud.errors("launching"):
        return cloud.launch(prepared.request, workdir=workdir or Path.cwd(), say=say)


def launch_json(r: LaunchResult) -> dict[str, Any]:
    """The run as ``cloud up --json`` shows it (less ``ok``)."""
    return {
        "run": r.run,
        "region": r.region,
        "inventory": str(r.inventory),
        "expires_at": r.expires_at,
        "host_keys": r.host_keys,
        "private_key": str(r.private_key) if r.private_key else None,
        "warnings": r.warnings,
        "instances": [
            {
                "id": i.id,
                "type": i.type,
                "public_ip": i.public_ip,
                "private_ip": i.private_ip,
                "state": i.state,
                "zone": i.zone,
                "market": i.market,
            }
            for i in r.instances
        ],
        "attempts": [
            {"type": a.instance_type, "zone": a.zone, "market": a.market, "outcome": a.outcome} for a in r.attempts
        ],
    }


@contextlib.contextmanager
def signals_as_interrupt(say: Say) -> Iterator[None]:
    """SIGTERM and SIGHUP end a launch as Ctrl-C does (:func:`provision.errors.signals_as_interrupt`):
    through its cleanup, instead of killing the process with the instances running."""

    with end_signals(say, cleanup="what this run created is removed", again="removing what the launch created"):
        yield
