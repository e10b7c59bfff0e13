"""The Azure program under strict mocks: each pillar renders what its references say."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.engine import OfflineRun, run_offline
from tests.components.azure.conftest import DEPLOYER, GROUP, azure_obj, named

Run = Callable[..., OfflineRun]


def test_the_vnet_declares_no_subnets_and_every_subnet_sits_inside_it(azure_run: Run) -> None:
    run = azure_run()
    vnet = run.one("azure-native:network:VirtualNetwork")
    assert vnet.inputs["addressSpace"] == {"addressPrefixes": ["10.0.0.0/16"]}
    assert "subnets" not in vnet.inputs and "subnets" in vnet.ignore_changes
    space = ipaddress.ip_network("10.0.0.0/16")
    prefixes = [ipaddress.ip_network(s.inputs["addressPrefix"]) for s in run.of_type("azure-native:network:Subnet")]
    assert len(prefixes) == 3 and all(p.subnet_of(space) for p in prefixes)
    assert not any(a.overlaps(b) for i, a in enumerate(prefixes) for b in prefixes[i + 1 :])
    assert not any(p.overlaps(ipaddress.ip_network("172.16.0.0/16")) for p in prefixes)


def test_node_subnets_egress_only_through_nat_and_lustre_has_its_own_subnet(azure_run: Run) -> None:
    run = azure_run()
    nat = run.one("azure-native:network:NatGateway")
    for role in ("nodes", "system"):
        sub = named(run, "azure-native:network:Subnet", f"-{role}")
        assert sub.inputs["defaultOutboundAccess"] is False
        assert sub.inputs["natGateway"] == {"id": f"{nat.name}-id"}
    lustre = named(run, "azure-native:network:Subnet", "-lustre")
    assert ipaddress.ip_network(lustre.inputs["addressPrefix"]).prefixlen == 24
    assert "natGateway" not in lustre.inputs
    fs = run.one("azure-native:storagecache:AmlFilesystem")
    assert fs.inputs["filesystemSubnet"] == f"{lustre.name}-id"
    ip = run.one("azure-native:network:PublicIPAddress")
    assert ip.inputs["sku"] == {"name": "Standard"} and ip.inputs["publicIPAllocationMethod"] == "Static"


def test_the_lustre_nsg_opens_988_and_1019_1023_inside_the_cluster_only(azure_run: Run) -> None:
    run = azure_run()
    rules = {
        r["name"]: r
        for r in named(run, "azure-native:network:NetworkSecurityGroup", "-lustre-nsg").inputs["securityRules"]
    }
    for rule, direction in (("allow-lustre-in", "Inbound"), ("allow-lustre-out", "Outbound")):
        r = rules[rule]
        assert (r["direction"], r["protocol"], r["access"]) == (direction, "Tcp", "Allow")
        assert r["destinationPortRanges"] == ["988", "1019-1023"]
        assert r["sourceAddressPrefix"] == r["destinationAddressPrefix"] == "10.0.0.0/16"
    assert rules["allow-azurecloud-out"]["destinationAddressPrefix"] == "AzureCloud"


def test_no_nsg_admits_the_internet(azure_run: Run) -> None:
    run = azure_run()
    for nsg in run.of_type("azure-native:network:NetworkSecurityGroup"):
        for r in nsg.inputs["securityRules"]:
            if r["access"] == "Allow" and r["direction"] == "Inbound":
                assert r["sourceAddressPrefix"] not in ("*", "Internet", "0.0.0.0/0"), (nsg.name, r)
        deny = [r for r in nsg.inputs["securityRules"] if r["access"] == "Deny"]
        assert deny and deny[0]["sourceAddressPrefix"] == "Internet"


@pytest.mark.parametrize(("tput", "size_gib"), [(40, 49152), (125, 32768), (250, 8192), (500, 12288)])
def test_managed_lustre_takes_the_sku_the_size_in_tib_and_a_maintenance_window(
    azure_run: Run, tput: int, size_gib: int
) -> None:
    run = azure_run(azure_obj(storage={"lustre": {"size_gib": size_gib, "throughput_mbps_per_tib": tput}}))
    fs = run.one("azure-native:storagecache:AmlFilesystem")
    assert fs.inputs["sku"] == {"name": f"AMLFS-Durable-Premium-{tput}"}
    assert fs.inputs["storageCapacityTiB"] == size_gib / 1024
    assert fs.inputs["maintenanceWindow"] == {"dayOfWeek": "Saturday", "timeOfDayUTC": "23:00"}
    assert fs.inputs["zones"] == ["2"] and fs.protect


def test_the_checkpoint_account_is_private_and_the_container_protected(azure_run: Run) -> None:
    run = azure_run()
    acct = run.one("azure-native:storage:StorageAccount")
    i = acct.inputs
    assert (
        i["enableHttpsTrafficOnly"],
        i["minimumTlsVersion"],
        i["allowBlobPublicAccess"],
        i["allowSharedKeyAccess"],
    ) == (
        True,
        "TLS1_2",
        False,
        False,
    )
    assert i["networkRuleSet"]["defaultAction"] == "Deny"
    name = i["accountName"]
    assert 3 <= len(name) <= 24 and name.isalnum() and name.islower()
    box = run.one("azure-native:storage:BlobContainer")
    assert box.inputs["publicAccess"] == "None" and box.inputs["containerName"] == "checkpoints"
    assert acct.protect and box.protect


def test_aks_admits_only_the_deployer_and_its_own_egress_and_uses_its_own_identity(azure_run: Run) -> None:
    run = azure_run()
    aks = run.one("azure-native:containerservice:ManagedCluster")
    i = aks.inputs
    # The deployer, and the NAT gateway's address the kubelets come from (api-server-authorized-ip-ranges.md:45).
    nat_ip = run.one("azure-native:network:PublicIPAddress").inputs["ipAddress"]
    assert i["apiServerAccessProfile"] == {"authorizedIPRanges": [DEPLOYER, f"{nat_ip}/32"]}
    assert i["identity"]["type"] == "UserAssigned"
    net = i["networkProfile"]
    assert net["outboundType"] == "userAssignedNATGateway"
    vnet = ipaddress.ip_network("10.0.0.0/16")
    for key in ("serviceCidr", "podCidr"):
        assert not ipaddress.ip_network(net[key]).overlaps(vnet)
    assert ipaddress.ip_address(net["dnsServiceIP"]) in ipaddress.ip_network(net["serviceCidr"])
    (system,) = i["agentPoolProfiles"]
    assert (system["mode"], system["enableNodePublicIP"]) == ("System", False)
    assert i["kubernetesVersion"] == "1.35"  # pinned (components/azure/rules.py), not AKS's default
    role = named(run, "azure-native:authorization:RoleAssignment", "network-role")
    assert role.inputs["roleDefinitionId"].endswith("/roleDefinitions/4d97b98b-1d4f-4787-a291-c67834d212e7")
    assert role.urn in aks.dependencies


@pytest.mark.parametrize("itype", ["Standard_ND96isr_H100_v5", "Standard_ND96isr_MI300X_v5"])
def test_the_gpu_pool_is_one_scale_set_with_the_driver_left_to_the_operators(azure_run: Run, itype: str) -> None:
    run = azure_run(azure_obj(itype))
    pool = named(run, "azure-native:containerservice:AgentPool", "gpu-pool")
    i = pool.inputs
    assert (i["vmSize"], i["count"], i["type"], i["mode"]) == (itype, 4, "VirtualMachineScaleSets", "User")
    assert i["gpuProfile"] == {"driver": "None"}
    assert i["enableNodePublicIP"] is False and i["availabilityZones"] == ["2"]
    assert i["nodeTaints"] == ["sku=gpu:NoSchedule"]
    assert i["resourceName"] == "nd" and len(i["agentPoolName"]) <= 12


def test_spot_reaches_the_pool(azure_run: Run) -> None:
    spot = azure_run(
        azure_obj(compute={"instance_type": "Standard_ND96isr_H100_v5", "nodes": 2, "capacity": {"type": "spot"}})
    )
    pool = named(spot, "azure-native:containerservice:AgentPool", "gpu-pool").inputs
    assert pool["scaleSetPriority"] == "Spot" and "capacityReservationGroupID" not in pool
    assert not [r for r in spot.of_type("azure-native:authorization:RoleAssignment") if "reservation" in r.name]


def test_every_resource_carries_the_cluster_tag(azure_run: Run) -> None:
    run = azure_run()
    untagged = [
        r.name
        for r in run.resources
        # Azure resources only: the in-cluster layer's Kubernetes objects are no ARM resources.
        if r.custom
        and r.type.startswith("azure-native:")
        and r.type
        not in (
            "azure-native:storage:BlobContainer",
            "azure-native:network:Subnet",
            "azure-native:authorization:RoleAssignment",
            # Child settings of a tagged resource, which take no tags of their own in the API.
            "azure-native:monitor:DiagnosticSetting",
            "azure-native:monitor:DataCollectionRuleAssociation",
            "azure-native:containerservice:MaintenanceConfiguration",
            "azure-native:storage:BlobServiceProperties",
        )
        and r.inputs.get("tags", {}).get("gpu-cluster") != "nd"
    ]
    assert not untagged


def test_the_outputs_meet_the_contract(azure_run: Run) -> None:
    out = read_outputs(azure_run().outputs)
    assert (out.cloud, out.orchestrator, out.nodes, out.gpus_per_node) == ("azure", "aks", 4, 8)
    assert out.fabric.type == "infiniband" and out.fabric.interfaces_per_node == 8
    assert out.mount.mount_name == "lustrefs" and "@tcp:/lustrefs /fsx" in out.mount.mount_command
    assert out.scheduler.node_selector == {"agentpool": "gpu"}
    # The kubeconfig file itself (decoded from the API's base64), as EKS and GKE export it; with local
    # accounts off it signs in through the deployer's `az login` (kubelogin, azurecli).
    assert out.access.kubeconfig is not None and out.access.kubeconfig.startswith("apiVersion: v1")
    (user,) = yaml.safe_load(out.access.kubeconfig)["users"]
    assert user["user"]["exec"]["command"] == "kubelogin"
    assert user["user"]["exec"]["args"][:3] == ["get-token", "--login", "azurecli"]
    # By hand: the same sign-in (kubelogin-authentication.md:219), and still the line heal reads the
    # resource group and cluster from.
    from gpu_cluster.heal.azure import cluster_of

    assert out.access.kubeconfig_command is not None
    assert out.access.kubeconfig_command.endswith(" && kubelogin convert-kubeconfig -l azurecli")
    assert cluster_of(out.access.kubeconfig_command)[1] == "nd"


def test_the_tear_down_page_names_every_protected_azure_resource(azure_run: Run) -> None:
    page = (Path(__file__).parents[3] / "docs" / "teardown.md").read_text()
    rows = [ln for ln in page.splitlines() if ln.startswith("| ") and "| Azure |" in ln]
    protected = [r for r in azure_run().resources if r.protect]
    assert len(protected) == 3
    for r in protected:
        assert [ln for ln in rows if f"`{r.type}`" in ln and f"`-{r.name.split('-', 1)[1]}`" in ln], r.name


def test_pillars_are_grouped_for_the_plan(azure_run: Run) -> None:
    run = azure_run()
    pillars = {r.type for r in run.resources if not r.custom}
    assert {"gpu-cluster:azure:Network", "gpu-cluster:azure:Storage", "gpu-cluster:azure:Orchestration"} <= pillars


def test_a_bad_spec_fails_with_the_path_before_any_resource() -> None:
    import pulumi

    with pytest.raises(pulumi.InputPropertiesError) as info:
        run_offline("bad", azure_obj(network={"cidr": "172.16.0.0/16"}))
    assert "network.cidr" in str(info.value) and "172.16.0.0/16" in str(info.value)


def _variant(tmp_path: Path, capacity: dict[str, Any]) -> Path:
    raw = yaml.safe_load((Path(__file__).parents[3] / "stacks" / "Pulumi.azure-h100-aks.yaml").read_text())
    raw["config"]["gpu-cluster:cluster"]["compute"]["capacity"] = capacity
    stack = tmp_path / f"Pulumi.azure-h100-{capacity['type']}.yaml"
    stack.write_text(yaml.safe_dump(raw))
    return stack


def test_a_spot_variant_of_the_bundled_stack_plans(tmp_path: Path) -> None:
    """`gpu-cluster plan` on azure-h100-aks with spot capacity: exit 0 (it raised KeyError 'azure'),
    liveness holds, and the spot caveat gives Azure's own eviction notice (Scheduled Events Preempt,
    at least 30 seconds: linux/scheduled-events.md @533281d)."""
    from gpu_cluster.plan import main

    out = tmp_path / "plan.json"
    assert main([str(_variant(tmp_path, {"type": "spot"})), "--json", str(out)]) == 0
    planned = json.loads(out.read_text())
    assert planned["summary"]["liveness"]["holds"] is True
    (spot,) = [c["text"] for c in planned["summary"]["caveats"] if c["topic"] == "spot"]
    assert "Scheduled Events Preempt notice at least 30 seconds ahead" in spot


def test_a_reservation_variant_of_the_bundled_stack_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ND pools cannot use on-demand capacity reservations (capacity-reservation-overview.md
    @05a4485, Limitations): plan stops with its exit for a stack with errors (2) and the one line,
    no traceback."""
    from gpu_cluster.plan import main

    stack = _variant(tmp_path, {"type": "reservation", "id": GROUP})
    assert main([str(stack), "--json", str(tmp_path / "plan.json")]) == 2
    err = capsys.readouterr()
    text = err.out + err.err
    assert "compute.capacity.type: 'reservation' is refused for Standard_ND96isr_H100_v5" in text
    assert "(allowed: on-demand, spot;" in text and "Traceback" not in text
