"""Storage rules: Lustre keys and protection, buckets' public access, access logs and lifecycle."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_cluster.policies.azure import AZURE_LUSTRE
from gpu_cluster.policies.core import (
    AWS_FSX_LUSTRE,
    AWS_S3_BUCKET_LOGGING,
    AWS_S3_BUCKETS,
    AWS_S3_LIFECYCLE,
    AWS_S3_PUBLIC_ACCESS_BLOCK,
    AWS_S3_VERSIONING,
    GCP_BUCKET,
    GCP_LUSTRE,
    S3_BLOCK_FLAGS,
    Props,
    RuleContext,
    StackFinding,
    StackResource,
    _get,
    _is_true,
    _items,
    _known,
    _refers_to,
    resource_rule,
    stack_rule,
)


@resource_rule(
    name="lustre-encrypted-cmk",
    description="FSx for Lustre is encrypted with a customer-managed KMS key: the one the stack's config names "
    "(storage.lustre.kms_key_id) or, when it names none, any customer key (the stack creates one); "
    "the FSx service key fails",
    enforcement="mandatory",
    ids=("CKV_AWS_190",),
    anchor="Checkov CKV_AWS_190",
    resource_types=(AWS_FSX_LUSTRE,),
)
def check_lustre_cmk(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != AWS_FSX_LUSTRE:
        return []
    given = props.get("kmsKeyId")
    if not given:
        return [
            "kmsKeyId is unset: FSx uses its service key (aws/fsx), which the account cannot scope or audit "
            "per file system; name a key in storage.lustre.kms_key_id or let the stack create one"
        ]
    if ctx.lustre_kms_key_id and given != ctx.lustre_kms_key_id:
        return [f"kmsKeyId is {given!r}, the stack's config names {ctx.lustre_kms_key_id!r}"]
    return []


@resource_rule(
    name="lustre-protected",
    description="Lustre file systems (FSx for Lustre, Managed Lustre, Azure Managed Lustre) are protected from deletion "
    "(protect=True); no scanner check exists, house rule STYLE.md 5",
    enforcement="mandatory",
    ids=(),
    anchor="gpu-cluster STYLE.md rule 5 (stateful resources say how they die)",
    resource_types=(AWS_FSX_LUSTRE, GCP_LUSTRE, AZURE_LUSTRE),
)
def check_lustre_protected(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type in (AWS_FSX_LUSTRE, GCP_LUSTRE, AZURE_LUSTRE) and not protect:
        return [
            "the file system is not protected (protect=True): a stray 'pulumi destroy' or replacement "
            "would delete the training data and checkpoints on it"
        ]
    return []


@resource_rule(
    name="gcs-public-access-prevented",
    description="GCS buckets enforce public access prevention and uniform bucket-level access",
    enforcement="mandatory",
    ids=("CKV_GCP_114", "CKV_GCP_29"),
    anchor="Checkov CKV_GCP_114/29",
    resource_types=(GCP_BUCKET,),
)
def check_gcs_public_access(resource_type: str, props: Props, protect: bool, ctx: RuleContext) -> list[str]:
    if resource_type != GCP_BUCKET:
        return []
    problems = []
    if props.get("publicAccessPrevention") != "enforced":
        problems.append(f"publicAccessPrevention is {props.get('publicAccessPrevention')!r}, must be 'enforced'")
    if not _is_true(props.get("uniformBucketLevelAccess")):
        problems.append(
            f"uniformBucketLevelAccess is {props.get('uniformBucketLevelAccess')!r}, must be true "
            "(object ACLs would bypass the bucket's IAM)"
        )
    return problems


@stack_rule(
    name="s3-public-access-blocked",
    description="Every S3 bucket has a BucketPublicAccessBlock with all four flags true",
    enforcement="mandatory",
    ids=("CKV_AWS_53", "CKV_AWS_54", "CKV_AWS_55", "CKV_AWS_56"),
    anchor="Checkov CKV_AWS_53-56",
)
def check_s3_public_access_blocked(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    blocks = [r for r in resources if r.type == AWS_S3_PUBLIC_ACCESS_BLOCK]
    findings: list[StackFinding] = []
    for bucket in (r for r in resources if r.type in AWS_S3_BUCKETS):
        name = bucket.props.get("bucket")
        mine = [b for b in blocks if _refers_to(b, "bucket", bucket, *([name] if isinstance(name, str) else []))]
        if not mine:
            findings.append((f"S3 bucket {bucket.name!r} has no BucketPublicAccessBlock", bucket.urn))
            continue
        for b in mine:
            off = [flag for flag in S3_BLOCK_FLAGS if not _is_true(b.props.get(flag))]
            if off:
                findings.append(
                    (
                        f"BucketPublicAccessBlock {b.name!r} of bucket {bucket.name!r} leaves "
                        f"{', '.join(off)} unset or false (all four must be true)",
                        b.urn,
                    )
                )
    return findings


def _bucket_aliases(bucket: StackResource) -> tuple[str, ...]:
    name = bucket.props.get("bucket")
    return (name,) if isinstance(name, str) else ()


def _s3_children(
    resources: Sequence[StackResource], types: tuple[str, ...], bucket: StackResource
) -> list[StackResource]:
    return [r for r in resources if r.type in types and _refers_to(r, "bucket", bucket, *_bucket_aliases(bucket))]


@stack_rule(
    name="bucket-access-logging",
    description="Every bucket logs its accesses to another bucket: an S3 bucket has a BucketLogging naming a "
    "target bucket, a GCS bucket a logging.logBucket. A bucket that is itself a log target is "
    "exempt (logging it would log its own log writes forever; S3 and GCS both advise against it), "
    "where Checkov flags it too",
    enforcement="mandatory",
    ids=("CKV_AWS_18", "AVD-AWS-0089", "CKV_GCP_62"),
    anchor="Checkov CKV_AWS_18/CKV_GCP_62, Trivy AVD-AWS-0089",
)
def check_bucket_access_logging(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    s3 = [r for r in resources if r.type in AWS_S3_BUCKETS]
    logging = [r for r in resources if r.type in AWS_S3_BUCKET_LOGGING]
    targets = {b.urn for b in s3 for lg in logging if _refers_to(lg, "targetBucket", b, *_bucket_aliases(b))}
    for bucket in s3:
        if bucket.urn in targets:
            continue
        mine = _s3_children(resources, AWS_S3_BUCKET_LOGGING, bucket)
        if not mine:
            findings.append(
                (f"S3 bucket {bucket.name!r} has no BucketLogging: its reads and writes leave no trail", bucket.urn)
            )
        for lg in mine:
            if not _known(lg.props, "targetBucket"):
                findings.append((f"BucketLogging {lg.name!r} of bucket {bucket.name!r} names no targetBucket", lg.urn))
    gcs = [r for r in resources if r.type == GCP_BUCKET]
    logged_to = {b.urn: _known(b.props, "logging", "logBucket") for b in gcs}
    gcs_targets = {t for t in logged_to.values() if isinstance(t, str)}
    for bucket in gcs:
        name = _known(bucket.props, "name")
        names = {n for n in (name, bucket.id) if isinstance(n, str)}
        if names & gcs_targets or (bucket.urn in {u for b in gcs for u in b.refs.get("logging", ())}):
            continue
        if not logged_to[bucket.urn]:
            findings.append(
                (f"GCS bucket {bucket.name!r} has no logging.logBucket: its usage is not logged", bucket.urn)
            )
    return findings


@stack_rule(
    name="bucket-lifecycle",
    description="Versioned buckets expire noncurrent versions after a set number of days (S3: a lifecycle "
    "configuration with noncurrentVersionExpiration and an abort of incomplete multipart uploads; "
    "GCS: a Delete rule on daysSinceNoncurrentTime), so overwritten checkpoints are not kept and "
    "billed forever; advisory: a stack may mean to keep every version",
    enforcement="advisory",
    ids=("CKV2_AWS_61", "CKV_AWS_300"),
    anchor="Checkov CKV2_AWS_61/CKV_AWS_300",
)
def check_bucket_lifecycle(resources: Sequence[StackResource], ctx: RuleContext) -> list[StackFinding]:
    findings: list[StackFinding] = []
    for bucket in (r for r in resources if r.type in AWS_S3_BUCKETS):
        versioned = any(
            _get(v.props, "versioningConfiguration", "status") == "Enabled"
            for v in _s3_children(resources, AWS_S3_VERSIONING, bucket)
        )
        if not versioned:
            continue
        rules = [
            rule
            for lc in _s3_children(resources, AWS_S3_LIFECYCLE, bucket)
            for rule in _items(lc.props.get("rules"))
            if rule.get("status") == "Enabled"
        ]
        if not any(_get(rule, "noncurrentVersionExpiration", "noncurrentDays") for rule in rules):
            findings.append(
                (
                    f"versioned S3 bucket {bucket.name!r} has no enabled lifecycle rule expiring "
                    "noncurrent versions (noncurrentVersionExpiration.noncurrentDays)",
                    bucket.urn,
                )
            )
        if not any(_get(rule, "abortIncompleteMultipartUpload", "daysAfterInitiation") for rule in rules):
            findings.append(
                (
                    f"S3 bucket {bucket.name!r} never aborts incomplete multipart uploads "
                    "(abortIncompleteMultipartUpload.daysAfterInitiation)",
                    bucket.urn,
                )
            )
    for bucket in (r for r in resources if r.type == GCP_BUCKET):
        if not _is_true(_get(bucket.props, "versioning", "enabled")):
            continue
        if not any(
            _get(rule, "action", "type") == "Delete" and _get(rule, "condition", "daysSinceNoncurrentTime")
            for rule in _items(bucket.props.get("lifecycleRules"))
        ):
            findings.append(
                (
                    f"versioned GCS bucket {bucket.name!r} has no Delete rule on condition.daysSinceNoncurrentTime",
                    bucket.urn,
                )
            )
    return findings
