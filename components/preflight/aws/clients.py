"""The boto3 clients the AWS checks read, and the one way they call them.

boto3 honours the standard ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``), so the
same code runs against moto's server in the tests.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError

from gpu_cluster.components.preflight import CouldNotCheck, Fatal


CREDENTIAL_ERRORS = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
}
ACCESS_ERRORS = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}


@dataclass(frozen=True, slots=True)
class AwsClients:
    sts: Any
    ec2: Any
    s3: Any
    quotas: Any
    ssm: Any = None
    """Systems Manager: the public EKS image parameter (None: that question is not asked)."""
    eks: Any = None
    """EKS: the Kubernetes and add-on versions offered in the region (None: could not check)."""
    pcs: Any = None
    """AWS PCS: whether the service answers in the region (None: could not check)."""
    ecr: Any = None
    """ECR: the pull-through cache rules of the region (None: could not check)."""

    @classmethod
    def from_environment(cls, region: str) -> AwsClients:
        """Clients from the standard chain (env, profile, SSO, instance role) and endpoints
        (``AWS_ENDPOINT_URL``); one attempt each, so an unreachable endpoint says so quickly."""
        cfg = Config(
            region_name=region, retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20
        )
        session = boto3.session.Session(region_name=region)
        return cls(
            sts=session.client("sts", config=cfg),
            ec2=session.client("ec2", config=cfg),
            s3=session.client("s3", config=cfg),
            quotas=session.client("service-quotas", config=cfg),
            ssm=session.client("ssm", config=cfg),
            eks=session.client("eks", config=cfg),
            pcs=session.client("pcs", config=cfg),
            ecr=session.client("ecr", config=cfg),
        )


def call(what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """One API call; credentials and reachability problems become :class:`Fatal`, a missing
    permission :class:`CouldNotCheck`, and other client errors are left to the caller."""
    try:
        return fn(**kwargs)
    except (NoCredentialsError, PartialCredentialsError):
        raise Fatal(
            "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "or run `aws sso login`)"
        ) from None
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        raise Fatal(f"AWS endpoint unreachable: {exc}") from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in CREDENTIAL_ERRORS:
            raise Fatal(f"AWS refused the credentials ({code}) on {what}") from None
        if code in ACCESS_ERRORS:
            raise CouldNotCheck(f"{what}: access denied to these credentials ({code})") from None
        raise
    except (BotoCoreError, ResponseParserError) as exc:
        raise CouldNotCheck(f"{what}: the endpoint's answer could not be read: {str(exc).splitlines()[0]}") from None


def when(value: Any) -> str:
    return (
        value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if isinstance(value, dt.datetime)
        else str(value)
    )
