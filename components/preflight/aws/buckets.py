"""The S3 buckets the stack reads or creates."""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call


def _bucket_of(path: str) -> str:
    return path[len("s3://") :].split("/", 1)[0]


def _bucket_region(ctx: Context, bucket: str) -> tuple[int, str | None]:
    """(HTTP status of HeadBucket, the bucket's region). S3 names the region in the
    ``x-amz-bucket-region`` header even on a 403 or a redirect."""
    try:
        resp = call("s3:HeadBucket", ctx.clients.s3.head_bucket, Bucket=bucket)
        headers = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return 200, headers.get("x-amz-bucket-region")
    except ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0))
        return status, meta.get("HTTPHeaders", {}).get("x-amz-bucket-region")


def check_buckets(ctx: Context) -> list[Problem]:
    """The data bucket (``storage.lustre.import_path``) exists, these credentials reach it and it
    is in the stack's region (issue 13 asks for this; the nodes reach S3 through the VPC's S3
    gateway endpoint, which serves its own region only; whether FSx also refuses a data
    repository association across regions was not re-read at its page here); a named checkpoint
    bucket does not exist yet (S3 names are global)."""
    spec = ctx.spec
    problems: list[Problem] = []
    lu = spec.storage.lustre
    if not lu.import_path and not spec.storage.bucket_name:
        raise NotApplicable("no import_path, and the checkpoint bucket's name is generated")
    if lu.import_path:
        bucket = _bucket_of(lu.import_path)
        status, region = _bucket_region(ctx, bucket)
        if status == 404:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} does not exist (allowed: an "
                    f"existing bucket in {spec.region} that holds the data)",
                )
            )
        elif status == 403:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} exists but these credentials may not "
                    "read it (another account's bucket, or a missing "
                    "s3:ListBucket permission)",
                )
            )
        elif status not in (200, 301):
            raise CouldNotCheck(f"s3:HeadBucket {bucket}: HTTP {status}")
        if status in (200, 301, 403) and region and region != spec.region:
            problems.append(
                Problem(
                    "storage.lustre.import_path",
                    f"bucket {bucket!r} is in {region}, not the stack's "
                    f"region {spec.region} (allowed: a bucket in {spec.region})",
                )
            )
    if spec.storage.bucket_name:
        status, region = _bucket_region(ctx, spec.storage.bucket_name)
        if status in (200, 301, 403):
            owner = "this account" if status == 200 else "another account (or a region these credentials cannot read)"
            problems.append(
                Problem(
                    "storage.bucket_name",
                    f"bucket {spec.storage.bucket_name!r} already exists "
                    f"({owner}, {region or 'region unknown'}); the stack creates it "
                    "(allowed: an unused name)",
                )
            )
    return problems
