"""Interconnect and Compute pillars: EFA group, placement group, launch template, image, IAM."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gpu_cluster.components.aws.compute import eks_release_parameter, pcs_ami_name_filter
from gpu_cluster.components.aws.interconnect import efa_layout
from tests.components.aws._offline import AWS_STACKS, in_pillar, one, raw_stack, run

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def _gpu_template(result: Any) -> dict[str, Any]:
    return one(result, LT, "-compute-gpu").inputs


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_efa_security_group(stack: str) -> None:
    result, _ = run(stack)
    sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa")
    sg_id = sg.name + "-id"
    ingress = in_pillar(result, "Interconnect", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    egress = in_pillar(result, "Interconnect", "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
    assert [
        (r.inputs["ipProtocol"], r.inputs.get("referencedSecurityGroupId"), r.inputs.get("cidrIpv4")) for r in ingress
    ] == [("-1", sg_id, None)]
    assert sorted(
        (r.inputs["ipProtocol"], r.inputs.get("referencedSecurityGroupId") or r.inputs.get("cidrIpv4")) for r in egress
    ) == sorted([("-1", sg_id), ("-1", "0.0.0.0/0")])
    assert all(r.inputs["securityGroupId"] == sg_id for r in ingress + egress)
    # No inline rules that would fight the standalone ones.
    assert "ingress" not in sg.inputs and "egress" not in sg.inputs


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_launch_template(stack: str) -> None:
    result, spec = run(stack)
    lt = _gpu_template(result)
    meta = lt["metadataOptions"]
    # Hop limit 1 (CKV_AWS_341): pods do not reach the node's credentials (issue 15).
    assert meta["httpTokens"] == "required" and meta["httpPutResponseHopLimit"] == 1
    (root,) = lt["blockDeviceMappings"]
    assert root["ebs"]["volumeType"] == "gp3" and root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["volumeSize"] == spec.compute.root_volume_gib

    sg_id = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa").name + "-id"
    expected = efa_layout(spec.instance)
    nics = lt["networkInterfaces"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics] == [
        (e.network_card_index, e.device_index, e.interface_type) for e in expected
    ]
    assert all(n["securityGroups"] == [sg_id] for n in nics)
    # PCS: the node subnet on every interface, as aws-hpc-recipes pcs-lt-efa-p5.yaml sets it;
    # EKS refuses a subnet in a managed node group's template ("launch-templates").
    node_subnet = one(result, "aws:ec2/subnet:Subnet", "-network-nodes").name + "-id"
    expected_subnets = {node_subnet} if spec.orchestration.kind == "slurm" else {None}
    assert {n.get("subnetId") for n in nics} == expected_subnets
    assert nics[0]["associatePublicIpAddress"] == "false"
    assert sum(n["interfaceType"] == "efa-only" for n in nics) == spec.instance.network.efa_interfaces
    # The instance and its volumes carry the tags, not only the template.
    kinds = {t["resourceType"]: t["tags"] for t in lt["tagSpecifications"]}
    assert kinds["instance"]["gpu-cluster"] == spec.name and kinds["volume"]["gpu-cluster"] == spec.name
    assert "iamInstanceProfile" not in lt  # both orchestrators set it from the node group


@pytest.mark.parametrize(
    "stack,placed",
    [
        ("aws-h100-eks", True),
        ("aws-h200-slurm", True),
        ("aws-h100-capacity-block", False),
        ("aws-b200-capacity-block", False),
    ],
)
def test_placement_group_follows_capacity(stack: str, placed: bool) -> None:
    result, spec = run(stack)
    groups = result.of_type("aws:ec2/placementGroup:PlacementGroup")
    lt = _gpu_template(result)
    if placed:
        assert [g.inputs["strategy"] for g in groups] == ["cluster"]
        assert lt["placement"]["groupName"] == result.outputs["fabric"]["placement"]
        assert result.outputs["fabric"]["placement"].startswith(groups[0].name)
    else:
        assert groups == [] and "placement" not in lt
        assert result.outputs["fabric"]["placement"] is None
    assert spec.interconnect.placement is placed


@pytest.mark.parametrize(
    "stack,instance_type",
    [("aws-h100-capacity-block", "p5.48xlarge"), ("aws-b200-capacity-block", "p6-b200.48xlarge")],
)
def test_capacity_block_market_options(stack: str, instance_type: str) -> None:
    result, spec = run(stack)
    lt = _gpu_template(result)
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = lt["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == spec.compute.capacity.id == "cr-0123456789abcdef0"
    # The type is in the template and not on the node group ("capacity-blocks-mng").
    assert lt["instanceType"] == instance_type
    ng = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu")
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK" and "instanceTypes" not in ng.inputs


def test_p6_b200_template_has_the_interfaces_its_cards_take() -> None:
    # The reference, written out rather than derived from efa_layout: p6-b200.48xlarge has 8
    # network cards (indexes 0..7) of at most 4 interfaces each, default card 0
    # (aws/amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go at b521883, lines 12572-12612) and
    # 8 EFA (Karpenter's instance types); EC2's efa-acc-inst-types puts the primary ENA at card 0
    # device 0, an EFA-only interface at card 0 device 1 when card 0 takes EFA, and one EFA-only
    # interface at device 0 of every other card.
    result, _ = run("aws-b200-capacity-block")
    nics = _gpu_template(result)["networkInterfaces"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        *[(card, 0, "efa-only") for card in range(1, 8)],
    ]
    per_card = [sum(n["networkCardIndex"] == card for n in nics) for card in range(8)]
    assert max(per_card) <= 4 and min(per_card) >= 1
    # The pods ask for what the template gives: one vpc.amazonaws.com/efa per EFA interface.
    assert result.outputs["fabric"]["interfaces_per_node"] == 8


def test_reservation_targets_the_odcr_without_placement() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["compute"]["capacity"] = {"type": "reservation", "id": "cr-0fedcba9876543210"}

    result, _ = run("aws-h100-eks", edit)
    lt = _gpu_template(result)
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0fedcba9876543210"
    }
    assert "instanceMarketOptions" not in lt and "placement" not in lt and "instanceType" not in lt
    assert result.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu").inputs["capacityType"] == "ON_DEMAND"


@pytest.mark.parametrize(
    "stack,field,value",
    [
        ("aws-h100-eks", "capacityType", "SPOT"),
        ("aws-h200-slurm", "purchaseOption", "SPOT"),
    ],
)
def test_spot_is_bought_by_the_node_group(stack: str, field: str, value: str) -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["compute"]["capacity"] = {"type": "spot"}

    result, _ = run(stack, edit)
    lt = _gpu_template(result)
    # EKS managed node groups refuse InstanceMarketOptions in their template.
    assert "instanceMarketOptions" not in lt and "capacityReservationSpecification" not in lt
    groups = [r for r in result.resources if r.name.endswith("-orchestration-gpu") and r.custom]
    assert [g.inputs[field] for g in groups] == [value]


def test_eks_image_is_the_recommended_nvidia_release() -> None:
    result, spec = run("aws-h100-eks")
    # The image release, and the account's zones for the control plane's second subnet (network).
    assert sorted(result.invokes) == [
        "aws:index/getAvailabilityZones:getAvailabilityZones",
        "aws:ssm/getParameter:getParameter",
    ]
    ng = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu").inputs
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng["releaseVersion"].startswith(spec.orchestration.kubernetes_version + ".")
    assert (
        eks_release_parameter("1.33")
        == "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
    )
    assert "imageId" not in _gpu_template(result)
    policies = {
        r.inputs["policyArn"].rsplit("/", 1)[1]
        for r in in_pillar(result, "Compute", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert {"AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly"} <= policies


def test_pcs_image_and_instance_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_cluster.components.aws import mocks

    queries: list[Any] = []
    answer = mocks.INVOKES["aws:ec2/getAmi:getAmi"]
    monkeypatch.setitem(mocks.INVOKES, "aws:ec2/getAmi:getAmi", lambda a: queries.append(a) or answer(a))
    result, _ = run("aws-h200-slurm", lambda raw: None)
    assert result.invokes == ["aws:ec2/getAmi:getAmi"]
    # One source of truth for the image: the compute node groups' amiId, never the launch templates.
    assert all("imageId" not in t.inputs for t in result.of_type("aws:ec2/launchTemplate:LaunchTemplate"))
    groups = result.of_type("aws-native:pcs:ComputeNodeGroup")
    assert {g.inputs["amiId"] for g in groups} == {"ami-0123456789abcdef0"} and len(groups) == 2
    # Slurm 25.11 sample image, Amazon Linux 2023 (PCS "AMI release notes"; aws-hpc-recipes
    # cluster.yaml builds the same prefix).
    assert pcs_ami_name_filter() == "aws-pcs-sample_ami-al2023-x86_64-slurm-25.11*"
    (query,) = queries
    assert query["owners"] == ["amazon"] and query["mostRecent"] is True
    (filt,) = [f for f in query["filters"] if f["name"] == "name"]
    assert filt["values"] == ["aws-pcs-sample_ami-al2023-x86_64-slurm-25.11*"]
    profile = one(result, "aws:iam/instanceProfile:InstanceProfile", "-compute-node")
    assert profile.inputs["path"] == "/aws-pcs/"
    # PCS passes the ROLE in the profile only if the role's path is /aws-pcs/ or its name starts
    # with AWSPCS (PCS API ComputeNodeGroup.iamInstanceProfileArn; PCS user guide "IAM instance
    # profiles for AWS PCS", Requirements). Every node group's profile holds such a role.
    node_role = one(result, "aws:iam/role:Role", "-compute-node")
    assert profile.inputs["role"] == node_role.inputs["name"]
    assert node_role.inputs.get("path") == "/aws-pcs/" or str(node_role.inputs["name"]).startswith("AWSPCS")
    assert all(g.inputs["iamInstanceProfileArn"].endswith("/" + profile.name) for g in groups)
    # Registration with this cluster only (CKV_AWS_355 / CKV_AWS_290, issue 15).
    policy = json.loads(one(result, "aws:iam/rolePolicy:RolePolicy", "-orchestration-node-register").inputs["policy"])
    cluster = one(result, "aws-native:pcs:Cluster", "-orchestration-pcs")
    (statement,) = policy["Statement"]
    assert statement["Action"] == ["pcs:RegisterComputeNodeGroupInstance"]
    assert statement["Resource"] == cluster.inputs["arn"] and statement["Resource"] != "*"
    role = one(result, "aws:iam/role:Role", "-compute-node")
    assert (
        one(result, "aws:iam/rolePolicy:RolePolicy", "-orchestration-node-register").inputs["role"]
        == role.inputs["name"]
    )
    user_data = base64.b64decode(_gpu_template(result)["userData"]).decode()
    assert user_data.startswith("Content-Type: multipart/mixed")
    # AL2023 keeps /usr/bin/python3 at 3.9 and ships 3.12 as the package python3.12 (AL2023 user
    # guide, "Python in AL2023"); the validation job needs >= 3.10. Installed after the mount, and a
    # failed install does not stop the boot script (set -e) before it is done.
    install = "command -v python3.12 >/dev/null || dnf install -y python3.12 || echo "
    assert install in user_data and user_data.index("chmod 1777") < user_data.index(install)


def test_pcs_capacity_block() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["compute"]["capacity"] = {"type": "capacity-block", "id": "cr-0123456789abcdef0"}

    result, _ = run("aws-h200-slurm", edit)
    lt = _gpu_template(result)
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert (
        lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"]
        == "cr-0123456789abcdef0"
    )
    # PCS "capacity-blocks-configure-cng": a valid InstanceType matching the block in the template,
    # maxInstanceCount not above the block; min 0 so the group can exist before the block starts.
    assert lt["instanceType"] == "p5en.48xlarge"
    gpu = [g for g in result.of_type("aws-native:pcs:ComputeNodeGroup") if g.inputs["name"] == "gpu"][0]
    assert gpu.inputs["scalingConfiguration"] == {"minInstanceCount": 0, "maxInstanceCount": 2}
    assert "placement" not in lt and result.of_type("aws:ec2/placementGroup:PlacementGroup") == []
    groups = {g.inputs["name"]: g.inputs["purchaseOption"] for g in result.of_type("aws-native:pcs:ComputeNodeGroup")}
    assert groups == {"gpu": "CAPACITY_BLOCK", "login": "ONDEMAND"}


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h200-slurm"])
def test_image_lookups_go_through_the_spec_region_provider(stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_cluster.components import engine

    seen: list[str] = []
    original = engine._StrictMocks.call

    def spy(self: Any, args: Any) -> Any:
        seen.append(str(args.provider))
        return original(self, args)

    monkeypatch.setattr(engine._StrictMocks, "call", spy)
    result, spec = run(stack, lambda raw: None)
    provider = one(result, "pulumi:providers:aws", f"{spec.name}-aws")
    assert provider.inputs["region"] == spec.region
    assert seen and all(p.startswith(provider.urn) for p in seen)


def test_unpinned_image_is_kept_once_created_and_a_pin_moves_it() -> None:
    """Day 2: a routine `pulumi up` never rolls the GPU nodes onto an image nobody chose."""
    result, _ = run("aws-h100-eks")
    ng = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu")
    assert ng.ignore_changes == ("releaseVersion",)

    def pin(raw: dict[str, Any]) -> None:
        raw["compute"]["image"] = "1.33.5-20251120"

    pinned, _ = run("aws-h100-eks", pin)
    ng = one(pinned, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu")
    assert ng.inputs["releaseVersion"] == "1.33.5-20251120" and ng.ignore_changes == ()
    assert "aws:ssm/getParameter:getParameter" not in pinned.invokes

    slurm, _ = run("aws-h200-slurm")
    assert {r.ignore_changes for r in slurm.of_type("aws-native:pcs:ComputeNodeGroup")} == {("amiId",)}
    # A newer sample image found by a later lookup changes nothing declared replace-on-change, and
    # the launch templates, which carry no image, keep their inputs: no new version rolls the nodes.
    from gpu_cluster.components.aws import mocks
    from gpu_cluster.components.engine import replacements

    answer = mocks.INVOKES["aws:ec2/getAmi:getAmi"]
    newer = lambda a: {**answer(a), "id": "ami-0fedcba9876543210", "imageId": "ami-0fedcba9876543210"}  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(mocks.INVOKES, "aws:ec2/getAmi:getAmi", newer)
        later, _ = run("aws-h200-slurm", lambda raw: None)
    templates = lambda r: {t.name: t.inputs for t in r.of_type("aws:ec2/launchTemplate:LaunchTemplate")}  # noqa: E731
    assert templates(later) == templates(slurm) and replacements(slurm, later) == {}
    changed = {
        g.name
        for g, h in zip(
            slurm.of_type("aws-native:pcs:ComputeNodeGroup"), later.of_type("aws-native:pcs:ComputeNodeGroup")
        )
        if g.inputs != h.inputs
    }
    assert changed == {g.name for g in slurm.of_type("aws-native:pcs:ComputeNodeGroup")}  # only amiId, ignored

    def pin_ami(raw: dict[str, Any]) -> None:
        raw["compute"]["image"] = "ami-0123456789abcdef0"

    slurm_pinned, _ = run("aws-h200-slurm", pin_ami)
    groups = slurm_pinned.of_type("aws-native:pcs:ComputeNodeGroup")
    assert {g.inputs["amiId"] for g in groups} == {"ami-0123456789abcdef0"}
    assert {g.ignore_changes for g in groups} == {()}


@pytest.mark.parametrize(
    "kind,image,word",
    [
        ("eks", "ami-0123456789abcdef0", "EKS AL2023 NVIDIA release"),
        ("slurm", "1.33.5-20251120", "AMI id"),
        ("eks", "latest", "EKS AL2023 NVIDIA release"),
    ],
)
def test_image_pin_must_fit_the_orchestrator(kind: str, image: str, word: str) -> None:
    from gpu_cluster.components.spec import SpecError, parse_spec

    _, raw = raw_stack("aws-h100-eks" if kind == "eks" else "aws-h200-slurm")
    raw["compute"]["image"] = image
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert any(p == "compute.image" and word in r for p, r in info.value.problems)
