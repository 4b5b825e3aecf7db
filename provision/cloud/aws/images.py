"""Which AMI to boot: ``--ami``, or the newest public image for ``--os`` / ``--base dlami``.

The public images are found the way AWS documents: the SSM public parameters that Canonical,
Debian, Amazon and the Deep Learning AMI team publish (one parameter per release and
architecture, always pointing at the newest image). Red Hat publishes no such parameter, so
RHEL is found by owner and name pattern, newest first. The look-up is a plain callable
(:data:`AmiLookup`) so that tests and air-gapped users can pass their own; moto has none of the
vendors' parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provision.errors import BadInput

# os id -> (arch -> SSM parameter); arch is the EC2 name (x86_64 | arm64).
SSM_PARAMETERS: dict[str, dict[str, str]] = {
    "ubuntu-22.04": {
        "x86_64": "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
        "arm64": "/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id",
    },
    "ubuntu-24.04": {
        "x86_64": "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id",
        "arm64": "/aws/service/canonical/ubuntu/server/24.04/stable/current/arm64/hvm/ebs-gp3/ami-id",
    },
    "debian-12": {
        "x86_64": "/aws/service/debian/release/12/latest/amd64",
        "arm64": "/aws/service/debian/release/12/latest/arm64",
    },
    "amzn-2023": {
        "x86_64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64",
        "arm64": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64",
    },
}

# The Deep Learning Base OSS Nvidia Driver AMIs: NVIDIA's driver already installed.
DLAMI_NAMES = {
    "ubuntu-22.04": "base-oss-nvidia-driver-gpu-ubuntu-22.04",
    "ubuntu-24.04": "base-oss-nvidia-driver-gpu-ubuntu-24.04",
    "amzn-2023": "base-oss-nvidia-driver-gpu-amazon-linux-2023",
}

# Red Hat's own account and its image names (no SSM parameter exists for RHEL).
RHEL_OWNER = "309956199498"
RHEL_NAME = {"rhel-9": "RHEL-9.*_HVM-*-{arch}-*"}

# The login user each image family creates through cloud-init.
SSH_USERS = {"ubuntu": "ubuntu", "debian": "admin", "amzn": "ec2-user", "rhel": "ec2-user"}

SUPPORTED_OS = tuple(sorted({*SSM_PARAMETERS, *RHEL_NAME}))


OS_ALIASES = {
    "amazonlinux-2023": "amzn-2023",
    "al2023": "amzn-2023",
    "rhel9": "rhel-9",
    "debian12": "debian-12",
}


def normalize_os(name: str) -> str:
    """An --os value as os-release ``ID-VERSION_ID``; one this module cannot boot is bad input."""
    key = name.strip().lower().replace("_", "-")
    key = OS_ALIASES.get(key, key)
    if key not in SUPPORTED_OS:
        raise BadInput(
            f"unknown --os `{name}` for EC2",
            f"use one of {', '.join(SUPPORTED_OS)}",
            suggestions=list(SUPPORTED_OS),
        )
    return key


def ec2_arch(arch: str) -> str:
    """The knowledge says ``aarch64``; EC2 images say ``arm64``."""
    return "arm64" if arch in ("aarch64", "arm64") else "x86_64"


def ssh_user(os_id: str) -> str:
    return SSH_USERS[os_id.split("-", 1)[0]]


@dataclass(frozen=True)
class ImageQuery:
    os: str  # ubuntu-24.04 ...
    arch: str  # x86_64 | arm64
    base: str  # "os" (the plain distribution) | "dlami"


@dataclass(frozen=True)
class Image:
    id: str
    arch: str
    root_device: str
    root_gib: int


# (query, region) -> AMI id. Raise BadInput for a combination that has no image.
AmiLookup = Callable[[ImageQuery], str]


def check_query(q: ImageQuery) -> None:
    """Refuse an --os / --base combination that no look-up can satisfy (before any AWS call)."""
    if q.base == "dlami":
        if q.os not in DLAMI_NAMES:
            raise BadInput(
                f"no Deep Learning AMI for --os {q.os}",
                f"use --os {' or --os '.join(sorted(DLAMI_NAMES))} with --base dlami, or drop --base",
            )
    elif q.os not in SUPPORTED_OS:
        raise BadInput(
            f"no public image look-up for --os {q.os}",
            f"use --os one of {', '.join(SUPPORTED_OS)}, or pass --ami",
            suggestions=list(SUPPORTED_OS),
        )


def parameter_name(q: ImageQuery) -> str | None:
    """The SSM public parameter for the query, or None where images are found by name (RHEL)."""
    if q.base == "dlami":
        return f"/aws/service/deeplearning/ami/{q.arch}/{DLAMI_NAMES[q.os]}/latest/ami-id"
    return SSM_PARAMETERS.get(q.os, {}).get(q.arch)


def aws_lookup(session: Any, region: str, call: Callable[..., Any]) -> AmiLookup:
    """The real look-up through SSM (and EC2 DescribeImages for RHEL); ``call`` adds the retries."""

    def lookup(q: ImageQuery) -> str:
        check_query(q)
        name = parameter_name(q)
        if name is not None:
            ssm = session.client("ssm", region_name=region)
            from botocore.exceptions import ClientError  # noqa: PLC0415 (botocore is heavy: only an AWS call loads it)

            try:
                return str(call(ssm.get_parameter, Name=name)["Parameter"]["Value"])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                    raise BadInput(
                        f"no public image for {q.os} {q.arch} in {region} (SSM {name} not found)",
                        "pass --ami, or try another --os or --region",
                    ) from exc
                raise
        ec2 = session.client("ec2", region_name=region)
        pattern = RHEL_NAME[q.os].format(arch=q.arch)
        images = call(
            ec2.describe_images,
            Owners=[RHEL_OWNER],
            Filters=[{"Name": "name", "Values": [pattern]}, {"Name": "architecture", "Values": [q.arch]}],
        )["Images"]
        if not images:
            raise BadInput(f"no {q.os} {q.arch} image from Red Hat in {region}", "pass --ami")
        return str(max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"])

    return lookup
