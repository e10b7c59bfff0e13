"""Offline answers for the AWS program (see components/engine.py).

INVOKES answers only the functions the program is known to call, in camelCase, shaped like
the provider's real answers; anything else fails the offline run. COMPUTED fills the
attributes a provider computes on create (ARNs, DNS names, endpoints, ids of the service),
so the outputs that derive from them resolve to plausible values.
"""

from __future__ import annotations

import base64
from typing import Any, Callable, Mapping

ACCOUNT = "123456789012"
MOCK_AMI = "ami-0123456789abcdef0"
MOCK_EKS_RELEASE = "1.35.5-20251120"


def _ssm_get_parameter(args: Mapping[str, Any]) -> dict[str, Any]:
    name = str(args["name"])
    if name.startswith("/aws/service/eks/optimized-ami/") and name.endswith("/recommended/release_version"):
        version = name.split("/")[5]
        value = f"{version}.5-20251120"
    elif name.startswith("/aws/service/eks/optimized-ami/") and name.endswith("/recommended/image_id"):
        value = MOCK_AMI
    else:
        raise KeyError(f"offline mock: no answer for SSM parameter {name!r}")
    return {
        "id": name,
        "name": name,
        "type": "String",
        "value": value,
        "insecureValue": value,
        "version": 1,
        "arn": f"arn:aws:ssm:us-east-1::parameter{name}",
        "withDecryption": True,
        "region": "us-east-1",
    }


def _ec2_get_ami(args: Mapping[str, Any]) -> dict[str, Any]:
    filters = {f["name"]: f["values"] for f in args.get("filters", [])}
    pattern = filters.get("name", ["unnamed*"])[0]
    return {
        "id": MOCK_AMI,
        "imageId": MOCK_AMI,
        "name": pattern.rstrip("*") + "-2025-11-01T00-00-00.000Z",
        "architecture": "x86_64",
        "ownerId": "amazon",
        "imageOwnerAlias": "amazon",
        "state": "available",
        "rootDeviceName": "/dev/xvda",
        "rootDeviceType": "ebs",
        "virtualizationType": "hvm",
        "owners": list(args.get("owners", [])),
        "mostRecent": bool(args.get("mostRecent", False)),
        "filters": list(args.get("filters", [])),
        "blockDeviceMappings": [],
        "productCodes": [],
        "tags": {},
        "region": "us-east-1",
    }


def _ec2_get_vpc(args: Mapping[str, Any]) -> dict[str, Any]:
    """An existing VPC (network.vpc_id), as DescribeVpcs shows one with DNS support and hostnames on."""
    vpc_id = str(args["id"])
    return {
        "id": vpc_id,
        "arn": f"arn:aws:ec2:us-east-1:{ACCOUNT}:vpc/{vpc_id}",
        "cidrBlock": "10.0.0.0/16",
        "enableDnsSupport": True,
        "enableDnsHostnames": True,
        "default": False,
        "state": "available",
        "ownerId": ACCOUNT,
        "tags": {},
        "region": "us-east-1",
    }


# The mock account's zone names and IDs (names map to different IDs in every account). us-east-1 has
# six zones, us-east-2 three (the AZ IDs of docs.aws.amazon.com/global-infrastructure/latest/regions/
# aws-availability-zones.html); the pairing is this mock's own, made so that us-east-1a is use1-az4.
MOCK_ZONES: Mapping[str, Mapping[str, str]] = {
    "us-east-1": {
        "us-east-1a": "use1-az4",
        "us-east-1b": "use1-az6",
        "us-east-1c": "use1-az1",
        "us-east-1d": "use1-az2",
        "us-east-1e": "use1-az3",
        "us-east-1f": "use1-az5",
    },
    "us-east-2": {"us-east-2a": "use2-az1", "us-east-2b": "use2-az2", "us-east-2c": "use2-az3"},
}


def _regular_zones(region: str) -> dict[str, str]:
    """Another region: zones a, b, c as az1, az2, az3 ("Each Region has at least three Availability
    Zones", docs.aws.amazon.com/global-infrastructure/latest/regions/aws-availability-zones.html)."""
    from gpu_cluster.components.aws.rules import zone_id_prefix

    prefix = zone_id_prefix(region)
    if prefix is None:
        raise KeyError(f"offline mock: {region!r} is no region whose zone IDs can be formed")
    return {f"{region}{letter}": f"{prefix}-az{i}" for i, letter in enumerate("abc", start=1)}


def _get_availability_zones(args: Mapping[str, Any]) -> dict[str, Any]:
    """DescribeAvailabilityZones for the program's one call: available, regular zones of a region."""
    region = str(args["region"])
    filters = [(f["name"], list(f["values"])) for f in args.get("filters", [])]
    if args.get("state") != "available" or filters != [("zone-type", ["availability-zone"])]:
        raise KeyError(f"offline mock: no answer for getAvailabilityZones {dict(args)!r}")
    zones = MOCK_ZONES.get(region) or _regular_zones(region)
    return {
        "id": region,
        "names": list(zones),
        "zoneIds": list(zones.values()),
        "groupNames": [region] * len(zones),
        "state": "available",
        "filters": list(args.get("filters", [])),
        "region": region,
    }


INVOKES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "aws:index/getAvailabilityZones:getAvailabilityZones": _get_availability_zones,
    "aws:ec2/getVpc:getVpc": _ec2_get_vpc,
    "aws:ssm/getParameter:getParameter": _ssm_get_parameter,
    "aws:ec2/getAmi:getAmi": _ec2_get_ami,
}


def _arn(service: str, kind: str) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
    def computed(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"arn": f"arn:aws:{service}:us-east-1:{ACCOUNT}:{kind}/{name}"}

    return computed


def _iam(kind: str) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
    def computed(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        path = str(inputs.get("path", "/"))
        return {"arn": f"arn:aws:iam::{ACCOUNT}:{kind}{path}{name}", "name": inputs.get("name", name)}

    return computed


def _lustre(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    fs = "fs-0123456789abcdef0"
    return {
        "arn": f"arn:aws:fsx:us-east-1:{ACCOUNT}:file-system/{fs}",
        "dnsName": f"{fs}.fsx.us-east-1.amazonaws.com",
        "mountName": "abcdefgh",
    }


def _eks_cluster(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMOCK\n-----END CERTIFICATE-----\n").decode()
    return {
        "arn": f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{name}",
        "name": inputs.get("name", name),
        "endpoint": "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": {"data": ca},
        "status": "ACTIVE",
    }


def _launch_template(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "arn": f"arn:aws:ec2:us-east-1:{ACCOUNT}:launch-template/lt-{name}",
        "latestVersion": 1,
        "defaultVersion": 1,
    }


def _bucket(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    bucket = inputs.get("bucket") or f"{name}-0a1b2c3"
    return {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}


def _placement_group(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": inputs.get("name") or f"{name}-0a1b2c3",
        "arn": f"arn:aws:ec2:us-east-1:{ACCOUNT}:placement-group/{name}",
    }


def _pcs(kind: str, prefix: str) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
    def computed(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        ident = f"{prefix}_{name}"
        return {"awsId": ident, "arn": f"arn:aws:pcs:us-east-1:{ACCOUNT}:{kind}/{ident}", "status": "ACTIVE"}

    return computed


COMPUTED: dict[str, Callable[[str, Mapping[str, Any]], dict[str, Any]]] = {
    # AMP workspace ids are ws-<uuid> (AMP API DescribeWorkspace); the mock keeps the logical name.
    "aws:amp/workspace:Workspace": lambda name, inputs: {
        "arn": f"arn:aws:aps:us-east-1:{ACCOUNT}:workspace/ws-{name}",
        "prometheusEndpoint": f"https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-{name}/",
    },
    "aws:grafana/workspace:Workspace": lambda name, inputs: {
        "arn": f"arn:aws:grafana:us-east-1:{ACCOUNT}:/workspaces/g-{name}",
        "endpoint": f"g-{name}.grafana-workspace.us-east-1.amazonaws.com",
    },
    "aws:ec2/vpc:Vpc": _arn("ec2", "vpc"),
    "aws:ec2/subnet:Subnet": _arn("ec2", "subnet"),
    "aws:ec2/securityGroup:SecurityGroup": _arn("ec2", "security-group"),
    "aws:ec2/placementGroup:PlacementGroup": _placement_group,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:iam/role:Role": _iam("role"),
    "aws:iam/instanceProfile:InstanceProfile": _iam("instance-profile"),
    "aws:kms/key:Key": _arn("kms", "key"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "aws:s3/bucket:Bucket": _bucket,
    "aws:eks/cluster:Cluster": _eks_cluster,
    "aws:eks/nodeGroup:NodeGroup": _arn("eks", "nodegroup"),
    "aws:eks/addon:Addon": _arn("eks", "addon"),
    # The rule's registryId is the account's (ECR API PullThroughCacheRule).
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": lambda name, inputs: {"registryId": ACCOUNT},
    "aws-native:pcs:Cluster": _pcs("cluster", "pcs"),
    "aws-native:pcs:ComputeNodeGroup": _pcs("computenodegroup", "pcs-cng"),
    "aws-native:pcs:Queue": _pcs("queue", "pcs-q"),
}
