"""The GCP audit trail: flow logs on the main subnet, usage logs and lifecycle of the checkpoint bucket.

Called from Network (``subnet_log_config`` on the system subnet) and Storage (``access_log_bucket``,
``checkpoint_logging``, ``checkpoint_lifecycle``), so the plan lists them under their pillars.

* Subnet flow logs (CKV_GCP_26) go to Cloud Logging. The values are the Compute API's own
  defaults, written out so the plan shows them and a change of default does not change the
  stack: 5-second aggregation, half the flows sampled, all metadata (SubnetworkLogConfig in the
  Compute Engine API reference, read 2026-12-01, and the same defaults in the pulumi_gcp 10.2.0
  ``compute.SubnetworkLogConfigArgs`` docstring: ``INTERVAL_5_SEC``, 0.5, ``INCLUDE_ALL_METADATA``). Cloud Logging keeps them in the ``_Default`` bucket for its retention (30 days
  unless the project changes it); ``security.log_retention_days`` applies to the log bucket below.
* Usage logs (CKV_GCP_62): the checkpoint bucket logs its requests into a log bucket of the
  stack, which grants ``roles/storage.objectCreator`` to ``group:cloud-storage-analytics@google.com``,
  the writer Cloud Storage uses (cloud.google.com/storage/docs/access-logs, "Set up log delivery").
  Google recommends Cloud Audit Logs for most auditing (same page, "Should you use usage logs or
  Cloud Audit Logs?"); usage logs are what the scanners check and cost only their storage.
  The log bucket is not logged itself (it would log its own deliveries).
* Lifecycle: noncurrent checkpoint versions are deleted ``security.checkpoint_noncurrent_days``
  after they stop being current (Object Lifecycle Management, condition ``daysSinceNoncurrentTime``).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.gcp.common import labels
from gpu_cluster.components.spec import ClusterSpec
from gpu_cluster.components.spec_security import SecuritySpec

USAGE_LOG_WRITER = "group:cloud-storage-analytics@google.com"
FLOW_AGGREGATION = "INTERVAL_5_SEC"
FLOW_SAMPLING = 0.5
FLOW_METADATA = "INCLUDE_ALL_METADATA"


def subnet_log_config(security: SecuritySpec) -> gcp.compute.SubnetworkLogConfigArgs | None:
    """The subnet's flow log settings, or None when the stack switched flow logs off."""
    if not security.flow_logs:
        return None
    return gcp.compute.SubnetworkLogConfigArgs(
        aggregation_interval=FLOW_AGGREGATION, flow_sampling=FLOW_SAMPLING, metadata=FLOW_METADATA
    )


def access_log_bucket(name: str, spec: ClusterSpec, parent: pulumi.Resource) -> gcp.storage.Bucket:
    """The bucket the checkpoint bucket's usage logs land in, writable by Cloud Storage's log writer."""
    bucket = gcp.storage.Bucket(
        f"{name}-logs",
        location=spec.region.upper(),
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        # Versioning (Checkov CKV_GCP_78, "Ensure Cloud storage has versioning enabled"; the AWS log
        # bucket has it too, CKV_AWS_21): an overwritten or deleted log object stays recoverable.
        # A version made noncurrent (by a person, or by the age rule below at log_retention_days)
        # is removed log_retention_days later (condition daysSinceNoncurrentTime; Cloud Storage,
        # "Object Lifecycle Management", cloud.google.com/storage/docs/lifecycle, read 2026-12-01: in
        # a versioned bucket a Delete of the live object leaves a noncurrent version), so a log lives
        # at most twice the retention, and a deletion can be undone for that long.
        versioning=gcp.storage.BucketVersioningArgs(enabled=True),
        lifecycle_rules=[
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=spec.security.log_retention_days),
            ),
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                    days_since_noncurrent_time=spec.security.log_retention_days
                ),
            ),
        ],
        force_destroy=False,
        labels=labels(spec),
        # The audit trail outlives a mistaken destroy like the checkpoints do (STYLE.md 5).
        opts=pulumi.ResourceOptions(parent=parent, protect=True),
    )
    gcp.storage.BucketIAMMember(
        f"{name}-logs-writer",
        bucket=bucket.name,
        role="roles/storage.objectCreator",
        member=USAGE_LOG_WRITER,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return bucket


def checkpoint_logging(log_bucket: gcp.storage.Bucket) -> gcp.storage.BucketLoggingArgs:
    return gcp.storage.BucketLoggingArgs(log_bucket=log_bucket.name, log_object_prefix="checkpoints")


def checkpoint_lifecycle(security: SecuritySpec) -> list[gcp.storage.BucketLifecycleRuleArgs]:
    return [
        gcp.storage.BucketLifecycleRuleArgs(
            action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
            condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                days_since_noncurrent_time=security.checkpoint_noncurrent_days
            ),
        )
    ]
