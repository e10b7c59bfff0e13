"""What the region offers the stack: the node image, EKS's Kubernetes and add-on versions, AWS PCS."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from botocore.parsers import ResponseParserError

from gpu_cluster.components.preflight import Context, CouldNotCheck, Fatal, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import ACCESS_ERRORS, CREDENTIAL_ERRORS, call, when


def check_node_image(ctx: Context) -> list[Problem]:
    """The node image the program will use exists in the region: on EKS the public SSM parameter of
    the recommended NVIDIA release for the Kubernetes version (SSM GetParameter; EKS user guide
    retrieve-ami-id), on PCS the sample AMI the program looks up (EC2 DescribeImages, owner amazon,
    the same name filter, x86_64) or the pinned AMI (DescribeImages ImageIds). A pinned EKS release
    is a version string: EKS checks it at the node group's creation, not asked here."""
    spec = ctx.spec
    if spec.orchestration.kind == "eks":
        if spec.compute.image is not None:
            raise NotApplicable(f"release {spec.compute.image} pinned: EKS checks it when the node group is made")
        if ctx.clients.ssm is None:
            raise CouldNotCheck("no Systems Manager client")
        from gpu_cluster.components.aws.compute import eks_release_parameter

        name = eks_release_parameter(spec.orchestration.kubernetes_version)
        try:
            call("ssm:GetParameter", ctx.clients.ssm.get_parameter, Name=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise CouldNotCheck(f"ssm:GetParameter {name}: {exc}") from None
            return [
                Problem(
                    "orchestration.kubernetes_version",
                    f"{spec.region} has no EKS AL2023 NVIDIA image for Kubernetes {spec.orchestration.kubernetes_version} "
                    f"(SSM parameter {name} not found) (allowed: a version EKS publishes that image for here, "
                    "or pin compute.image to a release)",
                )
            ]
        return []
    from gpu_cluster.components.aws.compute import pcs_ami_name_filter

    if spec.compute.image is not None:
        query: dict[str, Any] = {"ImageIds": [spec.compute.image]}
    else:
        query = {
            "Owners": ["amazon"],
            "Filters": [
                {"Name": "name", "Values": [pcs_ami_name_filter()]},
                {"Name": "architecture", "Values": ["x86_64"]},
            ],
        }
    try:
        resp = call("ec2:DescribeImages", ctx.clients.ec2.describe_images, **query)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "").startswith("InvalidAMIID"):
            resp = {"Images": []}
        else:
            raise CouldNotCheck(f"ec2:DescribeImages: {exc}") from None
    images = [i for i in resp.get("Images", []) if i.get("State", "available") == "available"]
    if images:
        newest = max(images, key=lambda i: str(i.get("CreationDate", "")))
        ctx.notes.append(f"node image in {spec.region}: {newest.get('ImageId')} ({newest.get('Name', '?')})")
        return []
    if spec.compute.image is not None:
        return [
            Problem(
                "compute.image",
                f"{spec.compute.image} is no available image in {spec.region} (allowed: an AMI id of this region)",
            )
        ]
    return [
        Problem(
            "compute.image",
            f"no AWS PCS sample image {pcs_ami_name_filter()} (owner amazon, x86_64) in {spec.region}; the program "
            "would find none (allowed: pin compute.image to an AMI built for PCS in this region, e.g. with "
            "aws-hpc-recipes dlami_for_pcs_imagebuilder)",
        )
    ]


def check_eks_versions(ctx: Context) -> list[Problem]:
    """EKS offers the stack's Kubernetes version in the region (EKS API DescribeClusterVersions:
    clusterVersions[].clusterVersion and versionStatus STANDARD_SUPPORT | EXTENDED_SUPPORT |
    UNSUPPORTED; EKS user guide kubernetes-versions: a version past standard support costs the
    extended-support price), and each managed add-on the stack installs has a version for it
    (DescribeAddonVersions with kubernetesVersion: addons[].addonVersions[].compatibilities[].
    clusterVersion). The add-ons are unpinned (components/aws/versions.py), so EKS picks the
    version marked defaultVersion for the cluster's version; one with none would fail CreateAddon."""
    spec = ctx.spec
    if spec.orchestration.kind != "eks":
        raise NotApplicable("not an EKS stack")
    if ctx.clients.eks is None:
        raise CouldNotCheck("no EKS client")
    from gpu_cluster.components.aws.versions import FSX_CSI_ADDON, POD_IDENTITY_ADDON, VPC_CNI_ADDON

    version = spec.orchestration.kubernetes_version
    eks = ctx.clients.eks
    try:
        resp = call(
            "eks:DescribeClusterVersions",
            eks.describe_cluster_versions,
            clusterType="eks",
            clusterVersions=[version],
            includeAll=True,
        )
    except ClientError as exc:
        raise CouldNotCheck(f"eks:DescribeClusterVersions: {exc}") from None
    found = [v for v in resp.get("clusterVersions", []) if v.get("clusterVersion") == version]
    status = str(found[0].get("versionStatus") or found[0].get("status") or "").upper() if found else ""
    if not found or status in ("UNSUPPORTED",):
        offered = call("eks:DescribeClusterVersions", eks.describe_cluster_versions, clusterType="eks")
        names = sorted(
            {str(v.get("clusterVersion")) for v in offered.get("clusterVersions", []) if v.get("clusterVersion")},
            key=lambda v: tuple(int(x) for x in v.split(".")),
        )
        return [
            Problem(
                "orchestration.kubernetes_version",
                f"EKS {'offers no' if not found else 'no longer supports'} Kubernetes {version} in {spec.region} "
                f"(eks:DescribeClusterVersions) (allowed: {', '.join(names) if names else 'a version EKS offers here'})",
            )
        ]
    if status in ("EXTENDED_SUPPORT", "EXTENDED-SUPPORT"):
        end = found[0].get("endOfExtendedSupportDate")
        ctx.notes.append(
            f"EKS {version} is in extended support in {spec.region}"
            + (f" until {when(end)}" if end else "")
            + ": the control plane pays the extended-support price per hour (EKS user guide kubernetes-versions)"
        )
    problems: list[Problem] = []
    for addon in (VPC_CNI_ADDON, POD_IDENTITY_ADDON, FSX_CSI_ADDON):
        try:
            answer = call(
                f"eks:DescribeAddonVersions {addon}",
                eks.describe_addon_versions,
                kubernetesVersion=version,
                addonName=addon,
            )
        except ClientError as exc:
            raise CouldNotCheck(f"eks:DescribeAddonVersions {addon}: {exc}") from None
        compatible = [
            av.get("addonVersion")
            for a in answer.get("addons", [])
            if a.get("addonName") == addon
            for av in a.get("addonVersions", [])
            if any(c.get("clusterVersion") == version for c in av.get("compatibilities", []))
        ]
        if not compatible:
            problems.append(
                Problem(
                    "orchestration.kubernetes_version",
                    f"EKS has no {addon} add-on version for Kubernetes {version} in {spec.region} "
                    "(eks:DescribeAddonVersions); the stack installs it (allowed: a version the add-on supports here)",
                )
            )
    return problems


def check_pcs_available(ctx: Context) -> list[Problem]:
    """AWS PCS answers in the region (PCS API ListClusters) and no other cluster is being created there.
    PCS is in fewer regions than EC2 (AWS General Reference, "AWS Parallel Computing Service endpoints
    and quotas", read 2026-12-01): with STS already answered, an endpoint that does not resolve here
    means the service is not offered. The per-cluster limits that matter here (instances per size)
    are the spec's (components/aws/rules.py); the PCS quotas page's other quotas were not read."""
    spec = ctx.spec
    if spec.orchestration.kind != "slurm":
        raise NotApplicable("not a PCS stack")
    if ctx.clients.pcs is None:
        raise CouldNotCheck("no AWS PCS client")
    clusters: list[dict[str, Any]] = []
    try:
        token: str | None = None
        while True:
            page = ctx.clients.pcs.list_clusters(**({"nextToken": token} if token else {}))
            clusters += page.get("clusters", [])
            token = page.get("nextToken")
            if not token:
                break
    except EndpointConnectionError:
        return [
            Problem(
                "region",
                f"AWS PCS does not answer in {spec.region} (no endpoint pcs.{spec.region}.amazonaws.com) "
                "(allowed: a region on the PCS endpoints page, docs.aws.amazon.com/general/latest/gr/pcs.html)",
            )
        ]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ACCESS_ERRORS:
            raise CouldNotCheck(f"pcs:ListClusters: access denied to these credentials ({code})") from None
        if code in CREDENTIAL_ERRORS:
            raise Fatal(f"AWS refused the credentials ({code}) on pcs:ListClusters") from None
        raise CouldNotCheck(f"pcs:ListClusters: {exc}") from None
    except (BotoCoreError, ResponseParserError) as exc:
        raise CouldNotCheck(f"pcs:ListClusters: {str(exc).splitlines()[0]}") from None
    # "There can only be 1 cluster in a Creating state per AWS Region per AWS account. CreateCluster
    # fails with a ServiceQuotaExceededException if there is already a cluster in a Creating state"
    # (PCS API reference, CreateCluster, read 2026-12-01; ListClusters' status enum has CREATING).
    creating = sorted(str(c.get("name")) for c in clusters if c.get("status") == "CREATING")
    if creating:
        return [
            Problem(
                "orchestration.kind",
                f"PCS cluster {', '.join(creating)} is being created in {spec.region}, and PCS creates one "
                "cluster at a time per region and account (CreateCluster would fail with "
                "ServiceQuotaExceededException) (allowed: run `pulumi up` once it is ACTIVE)",
            )
        ]
    return []
