"""The ``security:`` block of the cluster description: the audit trail and deliberate exceptions.

    security:
      flow_logs: true                 # VPC flow logs (AWS) / subnet flow logs (GCP); default true
      log_retention_days: 365         # how long the stack's log bucket keeps flow and access logs
      checkpoint_noncurrent_days: 30  # overwritten/deleted checkpoint versions expire after this
      exceptions:                     # policy pack rule -> why this stack deliberately departs from it
        flow-logs: "two-day benchmark cluster; flow logs cost more than the run"

Every field has a default, so a stack without the block gets the whole trail. Pure: no Pulumi
(``gpu_cluster.components.spec`` reads it; the components and ``gpu_cluster.policies.offline`` use the result).

What the trail costs, so a stack can decide (read 2026-12-01):

* AWS flow logs go to the stack's S3 log bucket as vended logs, billed per GB delivered: $0.25/GB
  for the first 10 TB a month in us-east-1 (aws.amazon.com/cloudwatch/pricing, "Vended Logs",
  delivery to S3; the same tiers in aws-samples/sample-cfm-tips-mcp
  services/cloudwatch_service_vended_log.py), plus S3 storage. A flow record summarises one
  connection per aggregation interval (10 minutes here), not its bytes, so the volume follows
  the number of flows, not the NCCL traffic.
* GCP subnet flow logs (50% sampling, 5 s aggregation: the API defaults, SubnetworkLogConfig in
  the Compute API reference) go to Cloud Logging and are billed per GiB generated
  (cloud.google.com/vpc/network-pricing, "VPC Flow Logs"); the rate was not confirmed here.
* Access logs and the log bucket: storage only (S3 server access logging has no charge of its
  own: docs.aws.amazon.com/AmazonS3/latest/userguide/enable-server-access-logging.html; GCS usage
  logs are ordinary objects: cloud.google.com/storage/docs/access-logs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from gpu_cluster.components.spec_reader import _Reader

SECURITY_KEYS = ("flow_logs", "log_retention_days", "checkpoint_noncurrent_days", "exceptions")
# The pack's rule for flow logs (policies/network.py FLOW_LOGS_RULE); switching flow logs off
# needs an exception naming it, so the stack says why rather than the pack failing it.
FLOW_LOGS_RULE = "flow-logs"
# A year of logs: Checkov's CKV_AWS_338 asks CloudWatch log groups to keep at least 365 days,
# the same bar for the log bucket here. Ten years is the longest we accept (CloudWatch's longest
# fixed retention is 3653 days, PutRetentionPolicy API reference).
DEFAULT_LOG_RETENTION_DAYS = 365
MAX_DAYS = 3653
# Our choice, not a cloud's: a month to notice a bad overwrite and restore the old version.
DEFAULT_NONCURRENT_DAYS = 30
_RULE_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySpec:
    flow_logs: bool = True
    """VPC flow logs of all traffic (AWS, into the stack's log bucket) and subnet flow logs (GCP)."""
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS
    """Days the stack's log bucket keeps flow logs and access logs before they expire."""
    checkpoint_noncurrent_days: int = DEFAULT_NONCURRENT_DAYS
    """Days a noncurrent (overwritten or deleted) checkpoint object version is kept."""
    exceptions: Mapping[str, str] = field(default_factory=dict)
    """Policy pack rule name -> the reason this stack departs from it (the pack's config carries it)."""


def parse_security(r: _Reader, raw: Any) -> SecuritySpec:
    """Read ``security:`` (absent: every default), recording problems on ``r``."""
    sec = r.mapping(raw, "security", SECURITY_KEYS)
    flow = sec.get("flow_logs", True)
    if not isinstance(flow, bool):
        r.bad("security.flow_logs", f"expected true or false, got {flow!r}")
        flow = True
    retention = r.integer(sec, "log_retention_days", "security", DEFAULT_LOG_RETENTION_DAYS, 1, MAX_DAYS)
    noncurrent = r.integer(sec, "checkpoint_noncurrent_days", "security", DEFAULT_NONCURRENT_DAYS, 1, MAX_DAYS)
    exceptions: dict[str, str] = {}
    raw_exc = sec.get("exceptions") or {}
    if not isinstance(raw_exc, Mapping):
        r.bad("security.exceptions", f"expected a mapping of rule name to reason, got {raw_exc!r}")
    else:
        for name, reason in raw_exc.items():
            path = f"security.exceptions.{name}"
            if not isinstance(name, str) or not _RULE_NAME.match(name):
                r.bad(path, "not a policy rule name (allowed: a rule of policies/README.md, e.g. flow-logs)")
            elif not isinstance(reason, str) or len(reason.strip()) < 10:
                r.bad(path, f"needs the reason as a sentence, got {reason!r} (allowed: a string of 10+ characters)")
            else:
                exceptions[name] = reason.strip()
    if flow is False and FLOW_LOGS_RULE not in exceptions:
        r.bad(
            "security.flow_logs",
            f"false needs security.exceptions.{FLOW_LOGS_RULE}: the reason the stack "
            "runs without a network trail (allowed: true, or false with that reason)",
        )
    return SecuritySpec(
        flow_logs=flow,
        log_retention_days=retention or DEFAULT_LOG_RETENTION_DAYS,
        checkpoint_noncurrent_days=noncurrent or DEFAULT_NONCURRENT_DAYS,
        exceptions=exceptions,
    )
