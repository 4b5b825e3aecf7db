"""The EC2 client of one region and the policies every phase shares: session, retries, paging, tags.

The session is boto3's standard one (``AWS_PROFILE``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``); :func:`open_session` reads only local configuration. :class:`Ec2Session`
is the base of the phase mixins (launch, failover, waits, listing, teardown) that
:class:`provision.cloud.aws.ec2.Ec2` puts together.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from provision.cloud.aws import errors as cerr
from provision.cloud.interface import utcnow
from provision.errors import BadInput, ProvisionError

LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def open_session(region: str | None) -> tuple[Any, str]:
    """boto3's standard session; refuses (exit 2) when no region or no credentials are found.

    Only local configuration is read here: nothing is sent to AWS before the input is known good.
    """
    import boto3  # noqa: PLC0415 (boto3 is heavy: only an AWS call loads it)
    from botocore.exceptions import ProfileNotFound  # noqa: PLC0415 (botocore is heavy: only an AWS call loads it)

    try:
        session = boto3.session.Session()
    except ProfileNotFound as exc:
        raise BadInput(f"AWS profile not found: {exc}", "check AWS_PROFILE against ~/.aws/config") from exc
    region = region or session.region_name or os.environ.get("AWS_REGION")
    if not region:
        raise BadInput("no AWS region given", "pass --region, or set AWS_REGION or a region in your profile")
    if session.get_credentials() is None:
        raise BadInput(
            "no AWS credentials found",
            "set AWS_PROFILE (and `aws sso login`), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    return session, region


def client_config() -> Any:
    from botocore.config import Config  # noqa: PLC0415 (botocore is heavy: only an AWS call loads it)

    # botocore's retries off: errors.call owns the retry policy, so every attempt is visible.
    return Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=60)


def aws_tags(d: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in d.items()]


def tag_map(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


class Ec2Session:
    """One region's EC2 client plus the policies of this module (retries, waits, tags)."""

    def __init__(
        self,
        session: Any,
        region: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = utcnow,
        poll_s: float = 5.0,
    ) -> None:
        self.session = session
        self.region = region
        self.client = session.client("ec2", region_name=region, config=client_config())
        self.sleep = sleep
        self.now = now
        self.poll_s = poll_s

    def call(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        return cerr.call(fn, sleep=self.sleep, **kwargs)

    def errors(self, what: str) -> AbstractContextManager[None]:
        """``what``'s AWS errors as one-line ProvisionErrors (the :class:`~provision.cloud.interface.Cloud` hook)."""
        return cerr.aws_errors(what)

    @staticmethod
    def _as_error(exc: BaseException) -> ProvisionError | None:
        """The one-line error for an AWS error that escaped a step; None to re-raise as it is."""
        if isinstance(exc, ProvisionError) or not isinstance(exc, Exception):
            return None
        c = cerr.classify(exc)
        return cerr.to_provision_error(c, "launching") if c else None

    def fail(self, exc: BaseException, what: str) -> ProvisionError:
        c = cerr.classify(exc)
        if c is None:
            raise exc
        return cerr.to_provision_error(c, what)

    def _paged(self, op: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self.call(getattr(self.client, op), **kwargs, **({"NextToken": token} if token else {}))
            if key == "Reservations":
                for r in page.get(key, []):
                    yield from r.get("Instances", [])
            else:
                yield from page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return

    def _describe(self, ids: list[str]) -> list[dict[str, Any]]:
        return list(self._paged("describe_instances", "Reservations", InstanceIds=ids))
