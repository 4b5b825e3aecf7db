"""The errors a cloud's failures become: exit 1 for what retrying will not fix, exit 2 for credentials.

Which provider failure becomes which is the provider's to say (AWS: :mod:`provision.cloud.aws.errors`
classifies every botocore error once); the launcher, the one-shot and the commands see only these.
"""

from __future__ import annotations

from provision.errors import BadInput, OperationFailed


class CloudError(OperationFailed):
    """A cloud call failed in a way that retrying will not fix (exit 1); ``aws_code`` names the AWS error."""

    code = "failed"

    def __init__(self, message: str, hint: str = "", *, aws_code: str = "") -> None:
        super().__init__(message, hint, details={"aws_code": aws_code} if aws_code else None)
        self.aws_code = aws_code


class CloudAuthError(BadInput):
    """Credentials missing, expired or lacking a permission (exit 2: the user must fix them)."""
