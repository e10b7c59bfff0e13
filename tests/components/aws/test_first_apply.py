"""What AWS would refuse, or run out of, on the first `pulumi up` (issue 13 items 1-11; issue 15's
IMDS hop limit and PCS policy): each test runs the program offline and checks what it would send
against the provider page or reference file the code cites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from gpu_cluster.components.aws import eks_sizing, versions
from gpu_cluster.components.aws.network_rules import EKS_DISALLOWED_ZONE_IDS
from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.k8s.addons import JOBSET_VERSION
from gpu_cluster.components.spec import MAX_NODES, SpecError, parse_spec
from tests.components.aws._offline import AWS_STACKS, one, raw_stack, run

NG = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
CHART = "kubernetes:helm.sh/v4:Chart"


def _edit(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        for path, value in changes.items():
            node = raw
            *parents, last = path.split("__")
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = value

    return edit


def _problems(stack: str, edit: Callable[[dict[str, Any]], None]) -> list[tuple[str, str]]:
    _, raw = raw_stack(stack)
    edit(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    return info.value.problems


def _gpu_groups(result: Any) -> list[Any]:
    return [g for g in result.of_type(NG) if g.inputs["labels"].get("gpu-cluster/role") == "gpu"]


# --- 1. capacity blocks --------------------------------------------------------------------------


def test_the_plan_says_when_a_capacity_block_s_nodes_appear() -> None:
    from gpu_cluster.components.aws.rules import capacity_note

    _, eks = run("aws-h100-capacity-block")
    note = capacity_note(eks)
    assert note is not None and f"the {eks.compute.nodes} GPU nodes appear when the block starts" in note
    assert f"desired size {eks.compute.nodes}" in note and str(eks.compute.capacity.id) in note
    _, on_demand = run("aws-h100-eks")
    assert capacity_note(on_demand) is None

    def block(raw: dict[str, Any]) -> None:
        raw["compute"]["capacity"] = {"type": "capacity-block", "id": "cr-0123456789abcdef0"}

    _, pcs = run("aws-h200-slurm", block)
    # min 0 makes every node dynamic: PCS launches them for a waiting job and releases them idle
    # (PCS user guide scaling-job-level), not once at the block's start.
    note = str(capacity_note(pcs))
    assert "the 2 GPU nodes appear when a job asks for them, not at `pulumi up`" in note
    assert "0 to 2 instances, all dynamic" in note and "releases them when they fall idle" in note


def test_capacity_block_group_survives_eks_scale_to_zero() -> None:
    """capacity-blocks-mng: the type only in the template (else "the create request will be
    rejected"), and EKS scales the group to 0 forty minutes before the block ends: min 0, and a
    later `pulumi up` does not set the desired size back."""
    result, spec = run("aws-h100-capacity-block")
    (ng,) = _gpu_groups(result)
    n = spec.compute.nodes
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK" and "instanceTypes" not in ng.inputs
    assert ng.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": n, "maxSize": n}
    assert "scalingConfig.desiredSize" in ng.ignore_changes
    lt = one(result, LT, "-compute-gpu").inputs
    assert lt["instanceType"] == spec.compute.instance_type
    # On-demand groups are fixed, and nothing ignores their size.
    (od,) = _gpu_groups(run("aws-h100-eks")[0])
    assert od.inputs["scalingConfig"]["minSize"] == od.inputs["scalingConfig"]["maxSize"] == 4
    assert "scalingConfig.desiredSize" not in od.ignore_changes
    assert "instanceType" not in one(run("aws-h100-eks")[0], LT, "-compute-gpu").inputs


# --- 2. FSx CSI add-on identity, 9. system node group, issue 15 IMDS ---------------------------


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_fsx_csi_addon_authenticates_through_pod_identity(stack: str) -> None:
    result, _ = run(stack)
    addons = {a.inputs["addonName"]: a for a in result.of_type(ADDON)}
    assert {"aws-fsx-csi-driver", "eks-pod-identity-agent", "vpc-cni"} <= set(addons)
    (assoc,) = addons["aws-fsx-csi-driver"].inputs["podIdentityAssociations"]
    assert assoc["serviceAccount"] == "fsx-csi-controller-sa"
    role = one(result, "aws:iam/role:Role", "-orchestration-fsx-csi")
    assert assoc["roleArn"] == f"arn:aws:iam::123456789012:role/{role.name}"
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ]
    # Only what a static volume can ask of the controller (orchestration_eks.FSX_CSI_ACTIONS), not the
    # AmazonFSxFullAccess the add-on's pages attach for dynamic provisioning.
    assert not [a for a in result.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "fsx-csi" in a.name]
    inline = one(result, "aws:iam/rolePolicy:RolePolicy", "-orchestration-fsx-csi")
    assert inline.inputs["role"] == role.inputs["name"]
    assert json.loads(inline.inputs["policy"])["Statement"] == [
        {"Sid": "StaticVolume", "Effect": "Allow", "Action": ["fsx:DescribeFileSystems"], "Resource": "*"}
    ]
    # The volume it serves is static: no StorageClass (so no CreateVolume), reclaim Retain (no
    # DeleteVolume), and nothing to expand; those are the driver's only write calls to FSx.
    assert not result.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    pv = one(result, "kubernetes:core/v1:PersistentVolume", "-orchestration-fsx-pv").inputs["spec"]
    assert pv["storageClassName"] == "" and pv["persistentVolumeReclaimPolicy"] == "Retain"


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_system_node_group_runs_the_controllers(stack: str) -> None:
    result, _ = run(stack)
    (system,) = [g for g in result.of_type(NG) if g.inputs["labels"] == {"gpu-cluster/role": "system"}]
    assert system.inputs["instanceTypes"] == [eks_sizing.SYSTEM_INSTANCE_TYPE] == ["c5.2xlarge"]
    assert system.inputs["capacityType"] == "ON_DEMAND" and system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert system.inputs["scalingConfig"]["minSize"] == eks_sizing.SYSTEM_NODES == 2
    assert system.inputs["subnetIds"] == _gpu_groups(result)[0].inputs["subnetIds"]
    # The NVIDIA chart's affinity admits only nodes labelled GPU: the system nodes get no plugin.
    assert "nvidia.com/gpu.present" not in system.inputs["labels"]
    lt = one(result, LT, "-orchestration-system").inputs
    assert lt["metadataOptions"]["httpTokens"] == "required" and lt["metadataOptions"]["httpPutResponseHopLimit"] == 1
    assert lt["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
    efa_sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa").name + "-id"
    assert lt["vpcSecurityGroupIds"] == [efa_sg]
    # The JobSet controller is pinned to the system nodes (chart value controller.nodeSelector).
    charts = {c.inputs["chart"]: c.inputs for c in result.of_type(CHART)}
    jobset = charts["oci://registry.k8s.io/jobset/charts/jobset"]
    assert jobset["values"]["controller"]["nodeSelector"] == {"gpu-cluster/role": "system"}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_node_template_closes_metadata_to_pods(stack: str) -> None:
    """Issue 15: hop limit 1 on every template (GPU, system, PCS login), IMDSv2 required."""
    result, _ = run(stack)
    templates = result.of_type(LT)
    assert len(templates) >= 2
    for lt in templates:
        meta = lt.inputs["metadataOptions"]
        assert (meta["httpTokens"], meta["httpPutResponseHopLimit"]) == ("required", 1), lt.name


# --- 8. scale: node groups of at most 450, addresses for pods -------------------------------------


def test_node_group_sizes() -> None:
    assert eks_sizing.node_group_sizes(4) == [4]
    assert eks_sizing.node_group_sizes(450) == [450]
    assert eks_sizing.node_group_sizes(451) == [226, 225]
    assert eks_sizing.node_group_sizes(1024) == [342, 341, 341]
    assert eks_sizing.node_group_sizes(MAX_NODES) == [410, 410, 410, 409, 409]
    # The spec's ceiling fits in the default "managed node groups per cluster" quota (30).
    assert MAX_NODES <= eks_sizing.max_gpu_nodes()
    with pytest.raises(ValueError, match="compute.nodes"):
        eks_sizing.node_group_sizes(0)


def test_1024_node_eks_offline_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 1,024-node EKS stack plans offline end to end (`gpu-cluster plan FILE --policy`)."""
    from gpu_cluster import plan

    doc = yaml.safe_load(Path("stacks/Pulumi.aws-h100-eks.yaml").read_text())
    doc["config"]["gpu-cluster:cluster"]["compute"]["nodes"] = 1024
    stack = tmp_path / "Pulumi.aws-h100-eks-1024.yaml"
    stack.write_text(yaml.safe_dump(doc))
    out = tmp_path / "plan.json"
    # 0: planned, and no mandatory policy of the pack is violated (3 would say otherwise).
    rc = plan.main([str(stack), "--json", str(out), "--policy"])
    # What the command said on stderr is the reason when it is not 0 (CI shows the assertion, not
    # the captured streams in full).
    assert rc == 0, capsys.readouterr().err[-4000:]
    planned = json.loads(out.read_text())
    assert planned["summary"]["nodes"] == 1024 and planned["summary"]["total_gpus"] == 8192
    gpu_groups = [
        r for r in planned["resources"] if r["type"] == NG and r["inputs"]["labels"].get("gpu-cluster/role") == "gpu"
    ]
    sizes = sorted((g["inputs"]["scalingConfig"]["maxSize"] for g in gpu_groups), reverse=True)
    assert sizes == [342, 341, 341] and sum(sizes) == 1024
    assert all(g["inputs"]["scalingConfig"]["maxSize"] <= eks_sizing.NODES_PER_MANAGED_NODE_GROUP for g in gpu_groups)
    assert sorted(g["name"] for g in gpu_groups) == [f"h100-eks-orchestration-gpu-{i}" for i in range(3)]
    # One launch template, one subnet, one type for all of them: one job spans the groups.
    assert len({json.dumps(g["inputs"]["launchTemplate"]) for g in gpu_groups}) == 1
    assert len({tuple(g["inputs"]["subnetIds"]) for g in gpu_groups}) == 1
    assert {tuple(g["inputs"]["instanceTypes"]) for g in gpu_groups} == {("p5.48xlarge",)}
    # Addresses: 1024 nodes need fewer than the /17 node subnet of the default /16 holds.
    need = eks_sizing.node_subnet_addresses_needed(1024)
    assert need == 1024 * 11 + 2 * 32 + 85 < 2**15


def test_vpc_cni_address_targets() -> None:
    """amazon-vpc-cni-k8s README: MINIMUM_IP_TARGET for the expected pods plus a small
    WARM_IP_TARGET replaces the default whole warm ENI (~50 addresses a p5 node)."""
    result, _ = run("aws-h100-eks")
    cni = [a for a in result.of_type(ADDON) if a.inputs["addonName"] == "vpc-cni"][0]
    values = json.loads(cni.inputs["configurationValues"])
    assert values["env"] == {"MINIMUM_IP_TARGET": "8", "WARM_IP_TARGET": "2"}
    assert cni.inputs["resolveConflictsOnCreate"] == "OVERWRITE"


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_vpc_cni_enforces_network_policy(stack: str) -> None:
    """EKS user guide cni-network-policy-configure (d9a9cba), Step 4: the managed add-on's configuration
    values hold the key "enableNetworkPolicy" with the string "true" ('{ "enableNetworkPolicy": "true" }');
    the chart's own default is the string "false" (amazon-vpc-cni-k8s values.yaml:126 at b521883)."""
    result, _ = run(stack)
    (cni,) = [a for a in result.of_type(ADDON) if a.inputs["addonName"] == "vpc-cni"]
    values = json.loads(cni.inputs["configurationValues"])
    assert values["enableNetworkPolicy"] == "true" and isinstance(values["enableNetworkPolicy"], str)
    # Nothing else of the network policy agent is set: standard enforcing mode, default ports 8162/8163.
    assert set(values) == {"enableNetworkPolicy", "env"} and "NETWORK_POLICY_ENFORCING_MODE" not in values["env"]


@pytest.mark.parametrize(
    "cidr,nodes,ok,fits",
    [
        ("10.0.0.0/16", 2048, True, 16),
        ("10.0.0.0/20", 160, True, 20),
        ("10.0.0.0/20", 200, False, 19),
        ("10.0.0.0/18", 1024, False, 17),
    ],
)
def test_node_subnet_must_hold_the_pods(cidr: str, nodes: int, ok: bool, fits: int) -> None:
    edit = _edit(network={"cidr": cidr}, compute__nodes=nodes)
    assert eks_sizing.smallest_vpc_prefix(nodes) == fits
    if ok:
        _, raw = raw_stack("aws-h100-eks")
        edit(raw)
        parse_spec(raw, deployer_placeholder=True)
        return
    problems = _problems("aws-h100-eks", edit)
    (reason,) = [r for p, r in problems if p == "network.cidr"]
    assert f"/{fits} or larger" in reason and str(nodes) in reason
    # PCS nodes take one address each (EFA-only interfaces have none): no such limit there.
    _, raw = raw_stack("aws-h200-slurm")
    edit(raw)
    raw["orchestration"]["size"] = "LARGE"  # PCS's size is the stack's (rules.py)
    parse_spec(raw)


# --- 7. ODCR and placement group -----------------------------------------------------------------


def test_reservation_in_a_placement_group_launches_into_that_group() -> None:
    capacity = {"type": "reservation", "id": "cr-0fedcba9876543210", "placement_group": "odcr-pg"}
    for stack in ("aws-h100-eks", "aws-h200-slurm"):
        result, spec = run(stack, _edit(compute__capacity=capacity))
        lt = one(result, LT, "-compute-gpu").inputs
        assert lt["placement"] == {"groupName": "odcr-pg"}
        assert lt["capacityReservationSpecification"]["capacityReservationTarget"] == {
            "capacityReservationId": "cr-0fedcba9876543210"
        }
        # The group is the reservation's: the stack creates none of its own.
        assert result.of_type("aws:ec2/placementGroup:PlacementGroup") == []
        assert result.outputs["fabric"]["placement"] == "odcr-pg"
        assert spec.compute.capacity.placement_group == "odcr-pg"


def test_reservation_without_a_group_launches_outside_any() -> None:
    result, _ = run("aws-h100-eks", _edit(compute__capacity={"type": "reservation", "id": "cr-0fedcba9876543210"}))
    assert "placement" not in one(result, LT, "-compute-gpu").inputs
    assert result.outputs["fabric"]["placement"] is None


@pytest.mark.parametrize(
    "capacity,word",
    [
        ({"type": "capacity-block", "id": "cr-0123456789abcdef0", "placement_group": "pg"}, "capacity block"),
        ({"type": "on-demand", "placement_group": "pg"}, "interconnect.placement"),
        ({"type": "spot", "placement_group": "pg"}, "only applies to a reservation"),
        (
            {"type": "reservation", "id": "cr-0fedcba9876543210", "placement_group": "has space"},
            "not a placement group",
        ),
    ],
)
def test_placement_group_mismatch_is_refused(capacity: dict[str, Any], word: str) -> None:
    problems = _problems("aws-h100-eks", _edit(compute__capacity=capacity))
    assert [p for p, r in problems if word in r] == ["compute.capacity.placement_group"]


def test_reservation_with_a_new_placement_group_is_refused() -> None:
    edit = _edit(
        compute__capacity={"type": "reservation", "id": "cr-0fedcba9876543210"}, interconnect={"placement": True}
    )
    assert [p for p, _ in _problems("aws-h100-eks", edit)] == ["interconnect.placement"]


def test_placement_group_is_aws_only() -> None:
    _, raw = raw_stack("gcp-h100-gke")
    raw["compute"]["capacity"] = {"type": "reservation", "id": "my-res", "placement_group": "pg"}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert "compute.capacity.placement_group" in [p for p, _ in info.value.problems]


# --- 10. versions --------------------------------------------------------------------------------


def test_versions_are_current_and_pinned_in_one_place() -> None:
    # EKS: the pin is in standard support past the date it was read (2026-12).
    assert versions.EKS_STANDARD_SUPPORT_END[versions.EKS_KUBERNETES_VERSION] > "2026-12-31"
    for stack in ("aws-h100-eks", "aws-h100-capacity-block"):
        result, spec = run(stack)
        assert spec.orchestration.kubernetes_version == versions.EKS_KUBERNETES_VERSION == "1.35"
        assert one(result, "aws:eks/cluster:Cluster", "-orchestration-eks").inputs["version"] == "1.35"
    # Without a version an EKS stack gets the pin, not a version in extended support.
    _, raw = raw_stack("aws-h100-eks")
    del raw["orchestration"]["kubernetes_version"]
    assert parse_spec(raw, deployer_placeholder=True).orchestration.kubernetes_version == "1.35"
    charts = {c.inputs["chart"]: c.inputs for c in run("aws-h100-eks")[0].of_type(CHART)}
    # EFA chart v0.5.30 installs image v0.5.20 (eks-charts Chart.yaml appVersion); NVIDIA 0.20.0.
    assert charts["aws-efa-k8s-device-plugin"]["version"] == versions.EFA_PLUGIN_VERSION == "v0.5.30"
    assert versions.EFA_PLUGIN_IMAGE_TAG == "v0.5.20"
    assert charts["nvidia-device-plugin"]["version"] == versions.NVIDIA_PLUGIN_VERSION == "0.20.0"
    assert charts["oci://registry.k8s.io/jobset/charts/jobset"]["version"] == JOBSET_VERSION == "0.12.0"
    # PCS: Slurm 25.11 on the AL2023 sample image.
    pcs = one(run("aws-h200-slurm")[0], "aws-native:pcs:Cluster", "-orchestration-pcs").inputs
    assert pcs["scheduler"]["version"] == versions.PCS_SLURM_VERSION == "25.11"
    assert versions.pcs_ami_name() == "aws-pcs-sample_ami-al2023-x86_64-slurm-25.11"


@pytest.mark.parametrize("version,ok", [("1.31", False), ("1.30", False), ("1.32", True), ("1.35", True)])
def test_eks_versions_past_extended_support_are_refused(version: str, ok: bool) -> None:
    edit = _edit(orchestration__kubernetes_version=version)
    if ok:
        _, raw = raw_stack("aws-h100-eks")
        edit(raw)
        parse_spec(raw, deployer_placeholder=True)
        return
    (reason,) = [r for p, r in _problems("aws-h100-eks", edit) if p == "orchestration.kubernetes_version"]
    assert "past the end of EKS extended support" in reason and "1.35" in reason


# --- 11. zones -----------------------------------------------------------------------------------


def test_zone_id_is_checked_where_it_can_be_offline() -> None:
    # EKS refuses use1-az3 (network-reqs): the node subnet is one of the control plane's.
    assert "use1-az3" in EKS_DISALLOWED_ZONE_IDS["us-east-1"]
    problems = _problems("aws-h100-eks", _edit(zone_id="use1-az3"))
    assert [p for p, r in problems if "EKS refuses" in r] == ["zone_id"]
    # p5en is offered in us-east-1 only in use1-az2 and use1-az6 (catalog zone_ids).
    assert load_catalog().get("p5en.48xlarge").zone_ids["us-east-1"] == ("use1-az2", "use1-az6")
    problems = _problems("aws-h100-eks", _edit(zone_id="use1-az4", compute__instance_type="p5en.48xlarge"))
    (reason,) = [r for p, r in problems if p == "zone_id"]
    assert "not offered in use1-az4" in reason and "use1-az2, use1-az6" in reason
    # Malformed or another region's ID.
    for bad in ("use2-az1", "us-east-1a", "use1-atl2-az1"):
        assert [p for p, r in _problems("aws-h100-eks", _edit(zone_id=bad)) if "not a zone ID" in r] == ["zone_id"]


def test_a_good_zone_id_creates_the_node_subnet_by_id() -> None:
    result, spec = run("aws-h100-eks", _edit(zone_id="use1-az4"))
    assert spec.zone_id == "use1-az4"
    for role in ("-network-nodes", "-network-public"):
        subnet = one(result, "aws:ec2/subnet:Subnet", role).inputs
        assert subnet["availabilityZoneId"] == "use1-az4" and "availabilityZone" not in subnet
    # The control plane's second subnet goes by ID too, chosen from the (mock) account's zones.
    cp = one(result, "aws:ec2/subnet:Subnet", "-network-control-plane").inputs
    assert cp["availabilityZoneId"] == "use1-az6" and "availabilityZone" not in cp
    # PCS has no EKS zone restriction: use1-az3 is fine for p5 there (offered in all six IDs).
    parse_spec(
        {
            **raw_stack("aws-h200-slurm")[1],
            "region": "us-east-1",
            "zone": "us-east-1a",
            "zone_id": "use1-az3",
            "compute": {"instance_type": "p5.48xlarge", "nodes": 2},
        }
    )


def test_zone_id_is_aws_only() -> None:
    _, raw = raw_stack("gcp-h100-gke")
    raw["zone_id"] = "usc1-az1"
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert "zone_id" in [p for p, _ in info.value.problems]


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_nothing_waits_for_a_gpu_node(stack: str) -> None:
    """Item 9: a capacity block not yet active (or GPU nodes still launching) holds up no add-on:
    the AWS add-ons and the Kubernetes provider (every chart and object goes through it) wait for
    the system nodes, never for a GPU node group."""
    result, _ = run(stack)
    index = result.by_urn()
    gpu = {g.urn for g in _gpu_groups(result)}

    def waits_for(urn: str, seen: set[str]) -> set[str]:
        for dep in index[urn].dependencies:
            if dep in index and dep not in seen:
                seen.add(dep)
                waits_for(dep, seen)
        return seen

    system = one(result, NG, "-orchestration-system").urn
    provider = one(result, "pulumi:providers:kubernetes", "-orchestration-k8s")
    for res in [provider, *result.of_type(ADDON)]:
        closure = waits_for(res.urn, set())
        assert not closure & gpu, f"{res.name} waits for a GPU node group"
    assert system in waits_for(provider.urn, set())
    fsx = [a for a in result.of_type(ADDON) if a.inputs["addonName"] == "aws-fsx-csi-driver"][0]
    assert system in waits_for(fsx.urn, set())
