"""The bundled AWS and GCP plans as a ``terraform show -json`` plan, for Checkov's terraform_plan framework.

pulumi-aws and pulumi-gcp are generated from the Terraform providers (aws, google), so each Pulumi
resource is the Terraform resource it wraps, with the same attribute names in camelCase: the
translation is the type token -> the Terraform type (TERRAFORM_TYPES, written out so a type nobody
mapped is reported, not silently unscanned), camelCase -> snake_case, nested objects as Terraform's
one-element block lists (maps such as tags and labels stay maps), and an input that names another
resource's mock id ("<name>-id", components/aws/mocks.py and components/gcp/mocks.py) written as a
reference in ``configuration``, which is how Checkov's graph checks join two resources.

``python -m tests.components.checkov_cloud_plan`` prints what fails per check and resource type.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpu_cluster.components.engine import OfflineRun
from tests.components.azure.checkov_plan import _address, _strings, scan

AWS_GCP_STACKS = (
    "aws-h100-eks",
    "aws-h100-capacity-block",
    "aws-h200-slurm",
    "aws-b200-capacity-block",
    "gcp-b200-gke",
    "gcp-h100-gke",
    "gcp-h200-gke",
    "gcp-h200-slurm",
)
# pulumi-aws / pulumi-gcp type token -> the Terraform resource it is generated from (the Terraform
# registry's names for hashicorp/aws and hashicorp/google).
TERRAFORM_TYPES = {
    "aws:amp/scraper:Scraper": "aws_prometheus_scraper",
    "aws:amp/workspace:Workspace": "aws_prometheus_workspace",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": "aws_default_security_group",
    "aws:ec2/eip:Eip": "aws_eip",
    "aws:ec2/flowLog:FlowLog": "aws_flow_log",
    "aws:ec2/internetGateway:InternetGateway": "aws_internet_gateway",
    "aws:ec2/launchTemplate:LaunchTemplate": "aws_launch_template",
    "aws:ec2/natGateway:NatGateway": "aws_nat_gateway",
    "aws:ec2/placementGroup:PlacementGroup": "aws_placement_group",
    "aws:ec2/route:Route": "aws_route",
    "aws:ec2/routeTable:RouteTable": "aws_route_table",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "aws_route_table_association",
    "aws:ec2/securityGroup:SecurityGroup": "aws_security_group",
    "aws:ec2/subnet:Subnet": "aws_subnet",
    "aws:ec2/vpc:Vpc": "aws_vpc",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "aws_vpc_endpoint",
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": "aws_ecr_pull_through_cache_rule",
    "aws:eks/addon:Addon": "aws_eks_addon",
    "aws:eks/cluster:Cluster": "aws_eks_cluster",
    "aws:eks/nodeGroup:NodeGroup": "aws_eks_node_group",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "aws_fsx_lustre_file_system",
    "aws:grafana/workspace:Workspace": "aws_grafana_workspace",
    "aws:iam/instanceProfile:InstanceProfile": "aws_iam_instance_profile",
    "aws:iam/role:Role": "aws_iam_role",
    "aws:iam/rolePolicy:RolePolicy": "aws_iam_role_policy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "aws_iam_role_policy_attachment",
    "aws:kms/key:Key": "aws_kms_key",
    "aws:s3/bucket:Bucket": "aws_s3_bucket",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": "aws_s3_bucket_lifecycle_configuration",
    "aws:s3/bucketLogging:BucketLogging": "aws_s3_bucket_logging",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": "aws_s3_bucket_ownership_controls",
    "aws:s3/bucketPolicy:BucketPolicy": "aws_s3_bucket_policy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": "aws_s3_bucket_public_access_block",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "aws_s3_bucket_server_side_encryption_configuration"
    ),
    "aws:s3/bucketVersioning:BucketVersioning": "aws_s3_bucket_versioning",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "aws_vpc_security_group_egress_rule",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "aws_vpc_security_group_ingress_rule",
    "gcp:compute/firewall:Firewall": "google_compute_firewall",
    "gcp:compute/globalAddress:GlobalAddress": "google_compute_global_address",
    "gcp:compute/network:Network": "google_compute_network",
    "gcp:compute/router:Router": "google_compute_router",
    "gcp:compute/routerNat:RouterNat": "google_compute_router_nat",
    "gcp:compute/subnetwork:Subnetwork": "google_compute_subnetwork",
    "gcp:container/cluster:Cluster": "google_container_cluster",
    "gcp:container/nodePool:NodePool": "google_container_node_pool",
    "gcp:hypercomputecluster/cluster:Cluster": "google_hypercomputecluster_cluster",
    "gcp:lustre/instance:Instance": "google_lustre_instance",
    "gcp:monitoring/dashboard:Dashboard": "google_monitoring_dashboard",
    "gcp:projects/iAMMember:IAMMember": "google_project_iam_member",
    "gcp:projects/service:Service": "google_project_service",
    "gcp:serviceaccount/account:Account": "google_service_account",
    "gcp:serviceaccount/iAMMember:IAMMember": "google_service_account_iam_member",
    "gcp:servicenetworking/connection:Connection": "google_service_networking_connection",
    "gcp:storage/bucket:Bucket": "google_storage_bucket",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "google_storage_bucket_iam_member",
}
# Inputs that are maps of strings in Terraform (not blocks): they stay maps.
# pulumi-aws/pulumi-gcp name a repeated Terraform block in the plural (the bridge's pluralisation);
# Terraform, and so Checkov, names it in the singular.
PLURAL_BLOCKS = {
    "rules": "rule",
    "allows": "allow",
    "denies": "deny",
    "guestAccelerators": "guest_accelerator",
    "secondaryIpRanges": "secondary_ip_range",
}
MAPS = {"tags", "tagsAll", "labels", "resourceLabels", "metadata", "userLabels", "effectiveLabels", "nodeSelector"}


def unmapped(runs: Iterable[OfflineRun]) -> set[str]:
    """The AWS/GCP resource types the runs declare that the translation does not know."""
    return {r.type for run in runs for r in run.resources if r.type.startswith(("aws:", "gcp:"))} - set(TERRAFORM_TYPES)


def _snake(key: str) -> str:
    if key in PLURAL_BLOCKS:
        return PLURAL_BLOCKS[key]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _value(key: str, v: Any) -> Any:
    if isinstance(v, Mapping):
        if key in MAPS:
            return dict(v)
        return [{_snake(k): _value(k, x) for k, x in v.items()}]
    if isinstance(v, list):
        return [_value(key, x)[0] if isinstance(x, Mapping) else x for x in v]
    return v


def terraform_plan(runs: Iterable[OfflineRun]) -> dict[str, Any]:
    """One plan holding every run's translated AWS/GCP resources."""
    planned: list[dict[str, Any]] = []
    configured: list[dict[str, Any]] = []
    for run in runs:
        # A bucket's versioning, policy, logging ... resources share its name and so its mock id: the
        # first resource with an id (the bucket itself, declared first) is the one it names.
        address_of: dict[str, str] = {}
        for r in run.resources:
            if r.type in TERRAFORM_TYPES:
                address_of.setdefault(r.id or f"{r.name}-id", _address(TERRAFORM_TYPES[r.type], r.name))
        for res in run.resources:
            tf = TERRAFORM_TYPES.get(res.type)
            if tf is None:
                continue
            own = _address(tf, res.name)
            values = {_snake(k): _value(k, v) for k, v in res.inputs.items()}
            refs = {}
            for attr, v in values.items():
                for s in _strings(v):
                    if s in address_of and address_of[s] != own:
                        refs[attr] = address_of[s]
                        break
            name = own.split(".", 1)[1]
            planned.append({"address": own, "mode": "managed", "type": tf, "name": name, "values": values})
            configured.append(
                {
                    "address": own,
                    "mode": "managed",
                    "type": tf,
                    "name": name,
                    "expressions": {a: {"references": [f"{t}.id", t]} for a, t in refs.items()},
                }
            )
    return {
        "format_version": "1.2",
        "terraform_version": "1.9.0",
        "planned_values": {"root_module": {"resources": planned}},
        "configuration": {"root_module": {"resources": configured}},
    }


def failures(report: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """(check id, Terraform type, address) of every failed AWS/GCP check."""
    return {
        (c["check_id"], c["resource"].split(".")[0], c["resource"])
        for c in report["results"]["failed_checks"]
        if c["resource"].startswith(("aws_", "google_"))
    }


def main() -> int:
    import tempfile

    from tests.checkov_venv import checkov_exe
    from tests.components.aws._offline import run

    runs = [run(s)[0] for s in AWS_GCP_STACKS]
    print("unmapped:", sorted(unmapped(runs)))
    with tempfile.TemporaryDirectory() as tmp:
        report = scan(checkov_exe(), terraform_plan(runs), Path(tmp))
    by: dict[tuple[str, str], list[str]] = {}
    for cid, tf, addr in failures(report):
        by.setdefault((cid, tf), []).append(addr)
    names = {c["check_id"]: c["check_name"] for c in report["results"]["failed_checks"]}
    print(len(by), "failing (check, type) pairs;", len(failures(report)), "failures")
    for (cid, tf), addrs in sorted(by.items()):
        print(f"{cid} {tf} ({names[cid]}): {len(addrs)} e.g. {sorted(addrs)[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
