"""Orchestration pillar: EKS (control plane, node group, in-cluster add-ons) and PCS (Slurm)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from email import message_from_string
from email.message import Message

import pytest

from typing import Any, Callable

from gpu_cluster.components.aws.common import cache_prefix
from gpu_cluster.components.aws.mocks import MOCK_ZONES
from gpu_cluster.components.engine import replacements
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE, JOBSET_CHART, JOBSET_VERSION
from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_CHART, PUSHGATEWAY_VERSION
from gpu_cluster.components.spec import DEPLOYER_PLACEHOLDER, SpecError, parse_spec
from tests.components.aws._offline import in_pillar, one, raw_stack, run

EKS = "aws:eks/cluster:Cluster"
CHART = "kubernetes:helm.sh/v4:Chart"
PCS = "aws-native:pcs:"


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_eks_control_plane(stack: str) -> None:
    result, spec = run(stack)
    cluster = one(result, EKS, "-orchestration-eks").inputs
    vpc = cluster["vpcConfig"]
    # Public for the deployers only (here the offline plan's placeholder), private for the VPC:
    # `pulumi up` reaches the API for the in-cluster layer, the nodes use the private side.
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == list(spec.orchestration.api_access_cidrs) == [DEPLOYER_PLACEHOLDER]
    # Two zones for the control plane, and it shares the nodes' EFA group.
    # The node subnet goes by the stack's zone name, the second by the zone ID chosen from the
    # (mock) account's zones: two different zones of that account.
    zones = MOCK_ZONES[spec.region]
    subnets = {
        s.name + "-id": s.inputs.get("availabilityZoneId") or zones[s.inputs["availabilityZone"]]
        for s in result.of_type("aws:ec2/subnet:Subnet")
    }
    assert len({subnets[s] for s in vpc["subnetIds"]}) == 2
    efa_sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa").name + "-id"
    assert vpc["securityGroupIds"] == [efa_sg]
    assert cluster["accessConfig"]["authenticationMode"] == "API"
    enc = cluster["encryptionConfig"]
    assert enc["resources"] == ["secrets"]
    key = one(result, "aws:kms/key:Key", "-orchestration-secrets")
    assert enc["provider"]["keyArn"].endswith(key.name) and key.inputs["enableKeyRotation"] is True
    assert cluster["version"] == spec.orchestration.kubernetes_version

    access = result.outputs["access"]
    assert access["api_endpoint"].startswith("https://")
    assert (
        access["kubeconfig_command"]
        == f"aws eks update-kubeconfig --region {spec.region} --name {spec.orchestration.cluster_name}"
    )
    assert result.outputs["scheduler"] == {
        "kind": "kubernetes",
        "namespace": JOB_NAMESPACE,
        "lustre_claim": "fsx-lustre",
        "node_selector": {"node.kubernetes.io/instance-type": spec.compute.instance_type},
        # The GPU groups' registration taint, which the validation job tolerates (issue 41, I6).
        "tolerations": ["gpu-cluster.io/unvalidated"],
        # The capacity-block stack asks for the ECR pull-through cache (test_image_cache.py).
        **(
            {
                "mirrors": {
                    "public.ecr.aws": f"123456789012.dkr.ecr.{spec.region}.amazonaws.com/{cache_prefix(spec.name)}"
                }
            }
            if spec.orchestration.pull_through_cache
            else {}
        ),
    }
    kubeconfig = json.loads(access["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == access["api_endpoint"]


def test_eks_with_public_deployers_reaches_the_api_with_their_ranges_only() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["orchestration"]["deployer_cidrs"] = ["203.0.114.7/32", "198.52.0.0/24"]

    result, _ = run("aws-h100-eks", edit)
    vpc = one(result, EKS, "-orchestration-eks").inputs["vpcConfig"]
    assert vpc["publicAccessCidrs"] == ["203.0.114.7/32", "198.52.0.0/24"]


def test_private_eks_creates_no_in_cluster_resource() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["orchestration"] = {"kind": "eks", "endpoint": "private"}

    result, _ = run("aws-h100-eks", edit)
    vpc = one(result, EKS, "-orchestration-eks").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False and "publicAccessCidrs" not in vpc
    assert not [r.type for r in result.resources if r.type.startswith(("kubernetes:", "pulumi:providers:kubernetes"))]
    # The AWS-side add-on still comes with the cluster, and the outputs still say how to reach it.
    one(result, "aws:eks/addon:Addon", "-orchestration-fsx-csi")
    assert result.outputs["access"]["kubeconfig"]


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h100-capacity-block"])
def test_eks_node_group(stack: str) -> None:
    result, spec = run(stack)
    ng = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu").inputs
    n = spec.compute.nodes
    if spec.compute.capacity.type == "capacity-block":
        # min 0: EKS scales the group to 0 before the block ends ("capacity-blocks-mng"); the
        # desired size fills once the block is active. The type lives in the launch template.
        assert ng["scalingConfig"] == {"desiredSize": n, "minSize": 0, "maxSize": n}
        assert "instanceTypes" not in ng
    else:
        assert ng["scalingConfig"] == {"desiredSize": n, "minSize": n, "maxSize": n}
        assert ng["instanceTypes"] == [spec.compute.instance_type]
    assert ng["subnetIds"] == [one(result, "aws:ec2/subnet:Subnet", "-network-nodes").name + "-id"]
    lt = one(result, "aws:ec2/launchTemplate:LaunchTemplate", "-compute-gpu")
    assert ng["launchTemplate"] == {"id": lt.name + "-id", "version": "1"}
    assert ng["nodeRoleArn"].endswith("role/" + one(result, "aws:iam/role:Role", "-compute-node").name)
    # Registered out of work until a validation passes the node: the EKS API's Taint (key 1-63
    # characters, effect NO_SCHEDULE | NO_EXECUTE | PREFER_NO_SCHEDULE; API reference, Taint), which
    # EKS does not put back once removed from a node (node-taints-managed-node-groups at 2ef9e38).
    assert ng["taints"] == [{"key": "gpu-cluster.io/unvalidated", "value": "true", "effect": "NO_SCHEDULE"}]
    assert len(ng["taints"][0]["key"].split("/")[1]) <= 63
    system = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-system").inputs
    assert "taints" not in system  # the controllers' nodes run no job: nothing to validate


def test_eks_in_cluster_addons() -> None:
    result, _ = run("aws-h100-eks")
    provider = one(result, "pulumi:providers:kubernetes", "-orchestration-k8s")
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == result.outputs["access"]["api_endpoint"]
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "aws"

    charts = {r.inputs["chart"]: r.inputs for r in result.of_type(CHART)}
    assert set(charts) == {
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        JOBSET_CHART,
        "dcgm-exporter",
        PUSHGATEWAY_CHART,
    }
    # the validation's figures reach AMP through it (components/k8s/metrics.py)
    assert charts[PUSHGATEWAY_CHART]["version"] == PUSHGATEWAY_VERSION
    assert charts["aws-efa-k8s-device-plugin"]["repositoryOpts"]["repo"] == "https://aws.github.io/eks-charts"
    assert charts[JOBSET_CHART]["version"] == JOBSET_VERSION
    efa_values = charts["aws-efa-k8s-device-plugin"]["values"]["supportedInstanceLabels"]
    assert efa_values == {"keys": ["node.kubernetes.io/instance-type"], "values": ["p5.48xlarge"]}
    # The plugin's image from the cluster region's EKS registry (EKS user guide add-ons-images:
    # us-east-1 is 602401143452.dkr.ecr.us-east-1.amazonaws.com), not the chart's us-west-2 default.
    assert charts["aws-efa-k8s-device-plugin"]["values"]["image"] == {
        "repository": "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    }
    # The NVIDIA chart's affinity admits nodes with this label; the node group sets it.
    ng = one(result, "aws:eks/nodeGroup:NodeGroup", "-orchestration-gpu").inputs
    assert ng["labels"]["nvidia.com/gpu.present"] == "true"
    # Everything that must run on a GPU node before its validation tolerates the registration
    # taint: the NVIDIA chart's defaults (values.yaml:64-93 at v0.20.0) with ours after them, the EFA
    # chart's template adds ours to its own, the DCGM exporter's default (values.yaml:153-156) and ours.
    ours = {"key": "gpu-cluster.io/unvalidated", "operator": "Exists", "effect": "NoSchedule"}
    assert charts["nvidia-device-plugin"]["values"]["tolerations"] == [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ours,
    ]
    assert charts["aws-efa-k8s-device-plugin"]["values"]["tolerations"] == [ours]
    assert charts["dcgm-exporter"]["values"]["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        ours,
    ]
    assert all(c.get("version") for c in charts.values())  # every chart pinned
    # the device plugins, JobSet, the DCGM exporter, the Pushgateway
    assert len(in_pillar(result, "Orchestration", CHART)) == 5

    addon = one(result, "aws:eks/addon:Addon", "-orchestration-fsx-csi").inputs
    assert addon["addonName"] == "aws-fsx-csi-driver"
    # No configuration values until the add-on's schema is known to take controller.nodeSelector
    # (CreateAddon rejects a key its schema lacks; orchestration_eks._create_fsx_csi).
    assert "configurationValues" not in addon
    pv = one(result, "kubernetes:core/v1:PersistentVolume", "-orchestration-fsx-pv").inputs["spec"]
    csi = pv["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    assert (
        csi["volumeHandle"] == one(result, "aws:fsx/lustreFileSystem:LustreFileSystem", "-storage-lustre").name + "-id"
    )
    mount = result.outputs["mount"]
    assert csi["volumeAttributes"] == {"dnsname": mount["dns_name"], "mountname": mount["mount_name"]}
    assert pv["persistentVolumeReclaimPolicy"] == "Retain" and pv["accessModes"] == ["ReadWriteMany"]
    assert pv["capacity"] == {"storage": "4800Gi"}
    pvc = one(result, "kubernetes:core/v1:PersistentVolumeClaim", "-orchestration-fsx-pvc").inputs["spec"]
    assert pvc["volumeName"] == "fsx-lustre" and pvc["storageClassName"] == ""


def _as_the_chart_writes(image: dict[str, str]) -> str:
    # Both charts write "{{ .Values.image.repository }}:{{ .Values.image.tag }}" (k8s-device-plugin
    # templates/_helpers.tpl:83-86 at v0.20.0; eks-charts aws-efa-k8s-device-plugin
    # templates/daemonset.yaml:66 at 5239609).
    return f"{image['repository']}:{image['tag']}"


def test_eks_chart_images_are_pulled_by_the_stacks_pins() -> None:
    from gpu_cluster.components.aws.versions import NVIDIA_PLUGIN_IMAGE, efa_plugin_image
    from gpu_cluster.components.k8s.addons import JOBSET_IMAGE
    from gpu_cluster.components.k8s.image_uses import layer_image_uses
    from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_IMAGE

    spec = run("aws-h100-eks")[1]
    refs = [u.ref for u in layer_image_uses(spec)]
    assert refs == [
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20",
        # The EFA exporter's DaemonSet (components/aws/efa_exporter.py; its pin: test_efa_exporter.py).
        "quay.io/prometheus/node-exporter:v1.12.1",
        JOBSET_IMAGE,
        PUSHGATEWAY_IMAGE,
    ]
    assert refs[:2] == [NVIDIA_PLUGIN_IMAGE, efa_plugin_image("us-east-1")]
    pins = {ref: "sha256:" + f"{i:x}" * 64 for i, ref in enumerate(refs, 1)}
    result, _ = run("aws-h100-eks", lambda raw: raw.update(images=pins))
    charts = {r.inputs["chart"]: r.inputs for r in result.of_type(CHART)}
    nvidia = charts["nvidia-device-plugin"]["values"]["image"]
    efa = charts["aws-efa-k8s-device-plugin"]["values"]["image"]
    assert _as_the_chart_writes(nvidia) == f"{refs[0]}@{pins[refs[0]]}"
    assert _as_the_chart_writes(efa) == f"{refs[1]}@{pins[refs[1]]}"
    assert charts[JOBSET_CHART]["values"]["image"]["tag"] == f"v{JOBSET_VERSION}@{pins[JOBSET_IMAGE]}"
    (exporter,) = [r.inputs for r in result.of_type("kubernetes:apps/v1:DaemonSet")]
    assert {c["image"] for c in exporter["spec"]["template"]["spec"]["containers"]} == {f"{refs[2]}@{pins[refs[2]]}"}
    gateway = charts[PUSHGATEWAY_CHART]["values"]["image"]
    assert f"{gateway['repository']}:{gateway['tag']}" == f"{PUSHGATEWAY_IMAGE}@{pins[PUSHGATEWAY_IMAGE]}"
    # A pin of another region's EFA image is not this stack's: the tag stays the chart's.
    other = {efa_plugin_image("us-west-2"): pins[refs[1]]}
    result, _ = run("aws-h100-eks", lambda raw: raw.update(images=other))
    [chart] = [r.inputs for r in result.of_type(CHART) if r.inputs["chart"] == "aws-efa-k8s-device-plugin"]
    assert chart["values"]["image"] == {"repository": refs[1].rsplit(":", 1)[0]}


def test_pcs_cluster_node_groups_queue() -> None:
    result, spec = run("aws-h200-slurm")
    cluster = one(result, PCS + "Cluster", "-orchestration-pcs")
    c = cluster.inputs
    assert c["scheduler"] == {"type": "SLURM", "version": "25.11"}
    assert c["size"] == "SMALL"
    node_subnet = one(result, "aws:ec2/subnet:Subnet", "-network-nodes").name + "-id"
    efa_sg = one(result, "aws:ec2/securityGroup:SecurityGroup", "-interconnect-efa").name + "-id"
    assert c["networking"] == {"subnetIds": [node_subnet], "securityGroupIds": [efa_sg]}

    groups = {r.inputs["name"]: r for r in result.of_type(PCS + "ComputeNodeGroup")}
    assert set(groups) == {"gpu", "login"}
    gpu, login = groups["gpu"].inputs, groups["login"].inputs
    n = spec.compute.nodes
    assert gpu["scalingConfiguration"] == {"minInstanceCount": n, "maxInstanceCount": n}
    assert gpu["instanceConfigs"] == [{"instanceType": "p5en.48xlarge"}]
    assert gpu["purchaseOption"] == "ONDEMAND"
    assert gpu["clusterId"] == c["awsId"] and gpu["subnetIds"] == [node_subnet]
    gpu_lt = one(result, "aws:ec2/launchTemplate:LaunchTemplate", "-compute-gpu").name + "-id"
    assert gpu["customLaunchTemplate"] == {"templateId": gpu_lt, "version": "1"}
    assert gpu["iamInstanceProfileArn"].endswith(
        "/aws-pcs/" + one(result, "aws:iam/instanceProfile:InstanceProfile", "-compute-node").name
    )
    assert login["scalingConfiguration"] == {"minInstanceCount": 1, "maxInstanceCount": 1}
    assert login["instanceConfigs"][0]["instanceType"].startswith(("m6i.", "c6i."))
    assert all(groups[g].delete_before_replace for g in groups)

    queue = one(result, PCS + "Queue", "-orchestration-queue")
    assert queue.inputs["name"] == spec.orchestration.partition == "gpu"
    assert queue.inputs["computeNodeGroupConfigurations"] == [{"computeNodeGroupId": gpu["awsId"]}]

    access = result.outputs["access"]
    assert access["cluster_id"] == c["awsId"]
    assert login["awsId"] in access["ssh_command"] and access["ssh_command"].startswith("aws ssm start-session")
    assert result.outputs["scheduler"] == {"kind": "slurm", "partition": "gpu"}


def test_pcs_login_with_a_key_pair_gets_an_ssh_command_that_runs_commands(tmp_path: Any) -> None:
    """orchestration.ssh_key_name: the login template carries the key pair (aws-hpc-recipes' PCS login
    template's KeyName) and access.ssh_command is ssh through Session Manager's AWS-StartSSHSession with
    portNumber=%p (AWS CLI ssm start-session, example 2). The command is run here as a user's shell
    and ssh would run it: the ProxyCommand's instance lookup and session start reach a stand-in
    `aws` with exactly the arguments the AWS CLI would get."""
    import os
    import shlex

    from gpu_cluster.workloads.validate import slurm

    result, spec = run("aws-h200-slurm", lambda raw: raw["orchestration"].update(ssh_key_name="team key"))
    assert spec.orchestration.ssh_key_name == "team key"
    [login_lt] = [t for t in result.of_type("aws:ec2/launchTemplate:LaunchTemplate") if t.name.endswith("-login")]
    assert login_lt.inputs["keyName"] == "team key"
    gpu_lt = one(result, "aws:ec2/launchTemplate:LaunchTemplate", "-compute-gpu")
    assert "keyName" not in gpu_lt.inputs  # only the login nodes take a key
    [login] = [g.inputs for g in result.of_type(PCS + "ComputeNodeGroup") if g.inputs["name"] == "login"]
    command = result.outputs["access"]["ssh_command"]
    argv = shlex.split(command)
    assert argv[0] == "ssh" and argv[-1] == f"ec2-user@{login['awsId']}"
    opts = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv[:-1]) if a == "-o")
    assert opts["StrictHostKeyChecking"] == "accept-new" and opts["HostKeyAlias"] == login["awsId"]
    # validate submit takes it as a shell that runs commands (not an interactive session).
    assert slurm.shell_for(command, here=False).prefix == tuple(argv)

    # What ssh does with ProxyCommand: %p becomes the port, the user's shell runs the rest.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake = bin_dir / "aws"
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'if [ "$1 $2" = "ec2 describe-instances" ]; then echo i-0123456789abcdef0; fi\n'
    )
    fake.chmod(0o755)
    proxy = opts["ProxyCommand"].replace("%p", "22")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-c", proxy], env=env, check=True)
    region, group = spec.region, login["awsId"]
    assert calls.read_text().splitlines() == [
        f"ec2 describe-instances --region {region} --filters Name=tag:aws:pcs:compute-node-group-id,Values={group} "
        "Name=instance-state-name,Values=running --query Reservations[0].Instances[0].InstanceId --output text",
        f"ssm start-session --region {region} --target i-0123456789abcdef0 --document-name AWS-StartSSHSession "
        "--parameters portNumber=22",
    ]
    # ssh itself reads the options as meant (-G prints the resolved configuration, connects nowhere).
    if shutil.which("ssh"):
        resolved = subprocess.run([*argv[:-1], "-G", argv[-1]], capture_output=True, text=True, check=True).stdout
        assert "user ec2-user" in resolved and f"hostkeyalias {group}" in resolved
        assert "proxycommand aws ssm start-session" in resolved


def test_ssh_key_name_is_for_pcs_only() -> None:
    _, eks = raw_stack("aws-h100-eks")
    eks["orchestration"]["ssh_key_name"] = "k"
    with pytest.raises(SpecError) as info:
        parse_spec(eks, deployer_placeholder=True)
    assert ("orchestration.ssh_key_name", "only applies to slurm on aws (the AWS PCS login nodes' key pair)") in (
        info.value.problems
    )
    _, pcs_raw = raw_stack("aws-h200-slurm")
    pcs_raw["orchestration"]["ssh_key_name"] = "x" * 256
    with pytest.raises(SpecError) as info:
        parse_spec(pcs_raw, deployer_placeholder=True)
    [(path, reason)] = info.value.problems
    assert path == "orchestration.ssh_key_name" and "1-255 printable ASCII characters" in reason


def _slurm(nodes: int, size: str | None) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["compute"]["nodes"] = nodes
        if size is not None:
            raw["orchestration"]["size"] = size

    return edit


def test_pcs_size_is_the_stack_s_and_never_follows_the_node_count() -> None:
    result, spec = run("aws-h200-slurm")
    assert spec.orchestration.size == "SMALL"  # the bundled stack names it
    assert one(result, PCS + "Cluster", "-orchestration-pcs").inputs["size"] == "SMALL"

    def unset(raw: dict[str, Any]) -> None:
        del raw["orchestration"]["size"]

    result, spec = run("aws-h200-slurm", unset)
    assert spec.orchestration.size is None  # unset is SMALL, not a size derived from the count
    assert one(result, PCS + "Cluster", "-orchestration-pcs").inputs["size"] == "SMALL"
    # pulumi-aws-native declares the size replace-on-change: the record carries the SDK's own list.
    assert "size" in one(result, PCS + "Cluster", "-orchestration-pcs").replace_on_changes
    result, _ = run("aws-h200-slurm", _slurm(100, "MEDIUM"))
    assert one(result, PCS + "Cluster", "-orchestration-pcs").inputs["size"] == "MEDIUM"


def test_more_instances_than_the_size_holds_are_refused_with_the_replacement_named() -> None:
    _, raw = raw_stack("aws-h200-slurm")
    del raw["orchestration"]["size"]
    _slurm(40, None)(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    ((path, reason),) = [(p, r) for p, r in info.value.problems if p == "orchestration.size"]
    assert "unset, so SMALL, which manages up to 32 instances; 40 GPU and 1 login nodes are 41" in reason
    assert "replaces it, with its queue and node groups" in reason and "orchestration.size: MEDIUM" in reason
    _slurm(600, "MEDIUM")(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, deployer_placeholder=True)
    assert [r for p, r in info.value.problems if p == "orchestration.size"][0].startswith(
        "MEDIUM, which manages up to 512 instances"
    )
    # The size is AWS PCS's: not for EKS, nor for Slurm on GCP.
    _, eks = raw_stack("aws-h100-eks")
    eks["orchestration"]["size"] = "SMALL"
    with pytest.raises(SpecError) as info:
        parse_spec(eks, deployer_placeholder=True)
    assert "orchestration.size" in [p for p, _ in info.value.problems]


def test_scaling_pcs_across_32_nodes_replaces_nothing_once_the_size_is_named() -> None:
    small, _ = run("aws-h200-slurm", _slurm(32, "MEDIUM"))
    large, _ = run("aws-h200-slurm", _slurm(40, "MEDIUM"))
    # The node group's counts change in place; nothing declared replace-on-change moved.
    gpu = one(large, PCS + "ComputeNodeGroup", "-orchestration-gpu")
    assert gpu.inputs["scalingConfiguration"]["maxInstanceCount"] == 40
    assert replacements(small, large) == {}
    # A size change is what replaces the cluster, and the queue and node groups go with it.
    was, _ = run("aws-h200-slurm", _slurm(31, None))
    replaced = replacements(was, large)
    pcs_name = one(large, PCS + "Cluster", "-orchestration-pcs").name
    assert replaced[pcs_name] == ("size",)
    assert {n.rsplit("-", 1)[1] for n, why in replaced.items() if why == (f"replaced with {pcs_name}",)} == {
        "gpu",
        "login",
        "queue",
    }


def test_every_pcs_node_mounts_lustre() -> None:
    result, spec = run("aws-h200-slurm")
    templates = result.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert {t.name.rsplit("-", 1)[1] for t in templates} == {"gpu", "login"}
    mount = result.outputs["mount"]
    for t in templates:
        doc = message_from_string(base64.b64decode(t.inputs["userData"]).decode())
        assert doc.is_multipart()
        # The Lustre mount is the first part; the GPU nodes' second is their metrics agent
        # (components/aws/slurm_metrics.py, tests/components/aws/test_slurm_metrics.py).
        parts = doc.get_payload()
        assert isinstance(parts, list) and len(parts) == (2 if t.name.endswith("-gpu") else 1)
        part = parts[0]
        assert isinstance(part, Message) and part.get_content_type() == "text/x-shellscript"
        script = part.get_payload()
        assert isinstance(script, str)
        assert f"{mount['dns_name']}@tcp:/{mount['mount_name']} {spec.storage.lustre.mount_point} lustre" in script
        if shutil.which("bash"):
            subprocess.run(["bash", "-n"], input=script, text=True, check=True, timeout=60)


def test_the_plan_names_what_a_change_would_replace(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpu-cluster plan NEW --from OLD`: 32 -> 40 PCS nodes at a named size replaces nothing;
    letting the size fall back to SMALL's default on the live MEDIUM cluster replaces it."""
    import yaml

    from gpu_cluster.components import plan

    def write(name: str, nodes: int, size: str | None) -> str:
        _, raw = raw_stack("aws-h200-slurm")
        _slurm(nodes, size)(raw)
        path = tmp_path / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": {"gpu-cluster:cluster": raw}}))
        return str(path)

    old, grown, shrunk = write("old", 32, "MEDIUM"), write("grown", 40, "MEDIUM"), write("shrunk", 31, None)
    assert plan.main([grown, "--from", old]) == 0
    assert "  replaces      nothing\n" in capsys.readouterr().out
    assert plan.main([shrunk, "--from", old]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  replaces")]
    assert line.endswith("resource(s)") and "-orchestration-pcs: size" in out


@pytest.mark.parametrize("stack", ["aws-h100-capacity-block", "aws-h100-eks"])
def test_a_new_image_on_a_capacity_block_recreates_the_group_instead_of_upgrading_it(stack: str) -> None:
    """EKS user guide capacity-blocks-mng (line 25 at 4d52b4d): a capacity block's managed node group
    is upgraded only at desired size 0. So on a block a compute.image change (releaseVersion) is made
    by deleting the group first and creating it again at the new image; elsewhere it is an in-place
    rolling update (UpdateNodegroupVersion), which replacement would only make worse."""

    def image(release: str) -> Callable[[dict[str, Any]], None]:
        return lambda raw: raw["compute"].update(image=release)

    before, _ = run(stack, image("1.35.5-20251120"))
    after, spec = run(stack, image("1.35.5-20251201"))
    gpu = [r for r in after.of_type("aws:eks/nodeGroup:NodeGroup") if "-orchestration-gpu" in r.name]
    assert gpu and all(g.inputs["releaseVersion"] == "1.35.5-20251201" for g in gpu)
    found = replacements(before, after)
    if spec.compute.capacity.type == "capacity-block":
        assert {g.name: found.get(g.name) for g in gpu} == {g.name: ("releaseVersion",) for g in gpu}
        assert all(
            g.delete_before_replace and set(g.replace_on_changes) == {"releaseVersion", "launchTemplate"} for g in gpu
        )
        from gpu_cluster.components.aws.rules import capacity_note

        note = capacity_note(spec) or ""
        assert "only at desired size 0" in note and "--from OLD" in note
    else:
        assert not any(g.name in found for g in gpu)
        assert not any(g.delete_before_replace or g.replace_on_changes for g in gpu)


def test_the_efa_plugin_image_follows_the_region_and_a_region_without_a_registry_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpu_cluster.components.aws.versions import EKS_REGISTRIES, efa_plugin_repository

    # GovCloud and China pull from their own partition's registry (EKS user guide add-ons-images).
    assert efa_plugin_repository("us-gov-west-1") == (
        "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    )
    assert efa_plugin_repository("cn-north-1").startswith("918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn/")
    # Every recorded registry is in its own region (the page's ap-east-2 row is not: left out).
    assert all(f".dkr.ecr.{region}.amazonaws.com" in host for region, host in EKS_REGISTRIES.items())
    # A region the catalog offers p5 in but with no registry recorded (here: us-east-1 taken out of the
    # table, since every p5 region has one) is refused by the spec, with the recorded ones named.
    from gpu_cluster.components.aws import rules

    monkeypatch.delitem(rules.EKS_REGISTRIES, "us-east-1")
    _, eks = raw_stack("aws-h100-eks")
    with pytest.raises(SpecError) as info:
        parse_spec(eks, deployer_placeholder=True)
    [reason] = [r for p, r in info.value.problems if p == "region"]
    assert reason.startswith("'us-east-1' has no EKS image registry recorded") and "us-east-2" in reason
