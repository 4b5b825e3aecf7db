"""Every EC2 failure classified once, so launch, list and teardown react to it the same way.

botocore raises ``ClientError`` with an error code; what to do about it depends only on that code
(and the HTTP status): retry the same call (throttling, 5xx), move on to the next zone or type
(capacity), or stop and say what the user must change (quota, credentials, image). ``call``
runs one API call under that policy; botocore's own retries are off (see ``session.client_config``)
so that the policy lives here and tests can see every attempt.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from provision.cloud.errors import CloudAuthError, CloudError
from provision.errors import ProvisionError

T = TypeVar("T")


class Kind(enum.Enum):
    RETRY = "retry"  # throttled or the service failed: the same call again, after a pause
    CAPACITY = "capacity"  # this zone/type cannot take it now: next zone, then next type
    QUOTA = "quota"  # an account limit: stop and name the quota to raise
    AUTH = "auth"  # credentials or permissions: stop
    BAD_IMAGE = "bad_image"  # the AMI does not exist or cannot be used: stop
    BAD_REQUEST = "bad_request"  # anything else the service refused: stop


THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
    }
)
SERVER = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "ServerInternal"})
CAPACITY = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "Unsupported",  # "the requested instance type is not supported in this Availability Zone"
        "SpotMaxPriceTooLow",
        "InsufficientSpotCapacity",
    }
)
QUOTA = frozenset(
    {
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "SecurityGroupLimitExceeded",
        "KeyPairLimitExceeded",
        "VolumeLimitExceeded",
        "AddressLimitExceeded",
    }
)
AUTH = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "OptInRequired",
        "Blocked",
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "PendingVerification",
    }
)
BAD_IMAGE = frozenset({"InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"})


@dataclass(frozen=True)
class Classified:
    kind: Kind
    code: str
    message: str


def classify(exc: BaseException) -> Classified | None:
    """What an exception from botocore means for us; None when it is not an AWS error at all."""
    from botocore.exceptions import (  # noqa: PLC0415 (botocore is heavy: only an AWS call loads it)
        ClientError,
        ConnectionClosedError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(exc, NoCredentialsError):
        return Classified(Kind.AUTH, "NoCredentials", str(exc))
    if isinstance(exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError)):
        return Classified(Kind.RETRY, type(exc).__name__, str(exc))
    if not isinstance(exc, ClientError):
        return None
    err = exc.response.get("Error", {})
    code = str(err.get("Code", ""))
    message = str(err.get("Message", "")) or str(exc)
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in THROTTLING or code in SERVER or status >= 500:
        kind = Kind.RETRY
    elif code in CAPACITY:
        kind = Kind.CAPACITY
    elif code in QUOTA:
        kind = Kind.QUOTA
    elif code in AUTH:
        kind = Kind.AUTH
    elif code in BAD_IMAGE:
        kind = Kind.BAD_IMAGE
    else:
        kind = Kind.BAD_REQUEST
    return Classified(kind, code, message)


# Service Quotas codes (service "ec2") for the limits a GPU launch meets; P and G are separate.
QUOTA_CODES = {
    ("p", False): ("L-417A185B", "Running On-Demand P instances"),
    ("p", True): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("g", False): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("g", True): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
}


def quota_for(instance_type: str, spot: bool) -> tuple[str, str]:
    """The Service Quotas code and name that bounds launching ``instance_type`` (P or G line)."""
    line = "p" if instance_type.startswith("p") else "g"
    return QUOTA_CODES[(line, spot)]


def to_provision_error(c: Classified, what: str) -> CloudError | CloudAuthError:
    """The one-line error for a failure that stops the command."""
    if c.kind is Kind.AUTH:
        return CloudAuthError(
            f"{what}: AWS refused the credentials ({c.code}: {c.message})",
            "check AWS_PROFILE / `aws sts get-caller-identity` and the IAM permissions for EC2",
        )
    if c.kind is Kind.BAD_IMAGE:
        return CloudError(
            f"{what}: the image cannot be used ({c.code}: {c.message})",
            "check --ami exists in this region, or use --os to look one up",
            aws_code=c.code,
        )
    return CloudError(f"{what}: {c.code}: {c.message}", "see the AWS message; rerun with --debug", aws_code=c.code)


Sleep = Callable[[float], None]


def call(
    fn: Callable[..., T],
    /,
    *args: Any,
    attempts: int = 6,
    base_delay: float = 0.5,
    max_delay: float = 20.0,
    sleep: Sleep = time.sleep,
    **kwargs: Any,
) -> T:
    """``fn(*args, **kwargs)``, retried on throttling and 5xx with full-jitter exponential backoff.

    Every other error is raised unchanged for the caller to classify: capacity errors need the
    caller's zone/type loop, the rest stop.
    """
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            c = classify(exc)
            if c is None or c.kind is not Kind.RETRY or attempt == attempts - 1:
                raise
            sleep(random.uniform(0, min(max_delay, base_delay * 2**attempt)))
    raise AssertionError("unreachable")  # the loop returns or raises


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """Turn an AWS error escaping ``what`` into its one-line ProvisionError (never a traceback)."""
    try:
        yield
    except ProvisionError:
        raise
    except Exception as exc:
        c = classify(exc)
        if c is None:
            raise
        raise to_provision_error(c, what) from exc
