"""AKS's in-cluster layer under strict mocks: the network operator and its NicClusterPolicy give
``rdma/ib``; NVIDIA's GPU operator drives H100/H200 and AMD's drives MI300X (the other way round
is refused); the Managed Lustre CSI driver goes in, in its install script's order, and the file
system's volume and claim reach the jobs' namespace, which the stack outputs name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from gpu_cluster.components.azure import mocks as azure_mocks
from gpu_cluster.components.azure.orchestration_aks import gpu_operator_for
from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.engine import OfflineRun, Recorded
from gpu_cluster.components.k8s import aks as layer
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE
from gpu_cluster.components.spec import parse_spec
from tests.components.azure.conftest import azure_obj, named

Run = Callable[..., OfflineRun]
H100, MI300X = "Standard_ND96isr_H100_v5", "Standard_ND96isr_MI300X_v5"
CHART = "kubernetes:helm.sh/v4:Chart"


def _charts(run: OfflineRun) -> dict[str, Recorded]:
    return {r.inputs["chart"]: r for r in run.of_type(CHART)}


def _cr(run: OfflineRun, kind: str) -> Recorded:
    (found,) = [r for r in run.resources if r.type.startswith("kubernetes:") and r.type.endswith(f":{kind}")]
    return found


def test_nic_cluster_policy_gives_rdma_ib_on_the_nodes_the_rule_labels(azure_run: Run) -> None:
    run = azure_run(azure_obj(H100))
    chart = _charts(run)["network-operator"]
    assert (chart.inputs["version"], chart.inputs["repositoryOpts"]["repo"]) == (
        "v26.1.0",
        "https://helm.ngc.nvidia.com/nvidia",
    )
    assert chart.inputs["values"]["nfd"] == {"deployNodeFeatureRules": False}
    assert set(chart.inputs["values"]) == {"nfd", "node-feature-discovery"}  # the tolerations, below
    assert chart.inputs["namespace"] == "network-operator"
    rule = _cr(run, "NodeFeatureRule")
    (r,) = rule.inputs["spec"]["rules"]
    assert r["labels"] == {"feature.node.kubernetes.io/pci-15b3.present": "true"}
    assert r["matchFeatures"] == [
        {"feature": "pci.device", "matchExpressions": {"device": {"op": "In", "value": ["101c", "101e"]}}}
    ]
    policy = _cr(run, "NicClusterPolicy")
    assert policy.inputs["apiVersion"] == "mellanox.com/v1alpha1"
    assert policy.inputs["metadata"]["name"] == "nic-cluster-policy"
    spec = policy.inputs["spec"]
    (term,) = spec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": next(iter(r["labels"])), "operator": "In", "values": ["true"]}]
    doca = spec["ofedDriver"]
    assert (doca["repository"], doca["image"], doca["version"]) == (
        "nvcr.io/nvidia/mellanox",
        "doca-driver",
        "doca3.3.0-26.01-1.0.0.0-0",
    )
    assert {"name": "OFED_BLACKLIST_MODULES_FILE", "value": "/host/etc/modprobe.d/blacklist-ofed-modules.conf"} in doca[
        "env"
    ]
    # A precompiled DOCA driver where NVIDIA publishes one for the node's kernel, else the compiling
    # image: never forced, which would leave the driver in Error on a kernel without one.
    assert doca["forcePrecompiled"] is False
    plugin = spec["sriovDevicePlugin"]
    assert (plugin["repository"], plugin["image"], plugin["version"]) == (
        "ghcr.io/k8snetworkplumbingwg",
        "sriov-network-device-plugin",
        "v3.9.0",
    )
    (resource,) = json.loads(plugin["config"])["resourceList"]
    assert f"{resource['resourcePrefix']}/{resource['resourceName']}" == layer.RDMA_RESOURCE == "rdma/ib"
    assert resource["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"], "isRdma": True}
    # The CRDs come with the chart: both objects wait for it.
    assert chart.urn in rule.dependencies and {chart.urn, rule.urn} <= set(policy.dependencies)


def test_nvidia_sizes_get_the_gpu_operator_with_rdma_after_the_network_operator(azure_run: Run) -> None:
    run = azure_run(azure_obj(H100))
    charts = _charts(run)
    assert "gpu-operator-charts" not in charts and "cert-manager" not in charts
    gpu = charts["gpu-operator"]
    assert (gpu.inputs["version"], gpu.inputs["namespace"]) == ("v26.3.0", "gpu-operator")
    values = gpu.inputs["values"]
    # GPUDirect RDMA; no precompiled driver: the chart offers it only on Ubuntu 22.04 kernels
    # (gpu-operator v26.3.0 values.yaml:129-131) and AKS 1.35's nodes run 24.04.
    assert values["driver"] == {"rdma": {"enabled": True}, "usePrecompiled": False}
    assert values["nfd"] == {"enabled": False}
    assert layer.AKS_NODE_OS == "ubuntu24.04"
    for manager in ("migManager", "vgpuDeviceManager", "vfioManager", "sandboxDevicePlugin"):
        assert values[manager] == {"enabled": False}
    # The chart's own toleration and the GPU pool's taint: the operands reach the tainted pool.
    taint_key = named(run, "azure-native:containerservice:AgentPool", "gpu-pool").inputs["nodeTaints"][0].split("=")[0]
    keys = {t["key"] for t in values["daemonsets"]["tolerations"]}
    assert keys == {"nvidia.com/gpu", taint_key}
    assert _cr(run, "NicClusterPolicy").urn in gpu.dependencies


def test_mi300x_gets_amds_operator_and_device_config_not_nvidias(azure_run: Run) -> None:
    run = azure_run(azure_obj(MI300X))
    charts = _charts(run)
    assert "gpu-operator" not in charts
    cert, amd = charts["cert-manager"], charts["gpu-operator-charts"]
    assert (cert.inputs["version"], cert.inputs["values"]) == ("v1.15.1", {"crds": {"enabled": True}})
    assert (amd.inputs["version"], amd.inputs["repositoryOpts"]["repo"], amd.inputs["namespace"]) == (
        "v1.4.1",
        "https://rocm.github.io/gpu-operator",
        "kube-amd-gpu",
    )
    assert amd.inputs["values"]["crds"] == {"defaultCR": {"install": False}}
    assert cert.urn in amd.dependencies
    config = _cr(run, "DeviceConfig")
    assert config.inputs["metadata"] == {"name": "gpu-operator", "namespace": "kube-amd-gpu"}
    assert config.inputs["spec"]["driver"]["enable"] is False  # the GPU pool's driver is None
    assert amd.urn in config.dependencies
    # No image is left on a moving tag.
    assert "latest" not in json.dumps(config.inputs["spec"])
    # InfiniBand is the same on MI300X: rdma/ib from the same policy.
    assert "sriovDevicePlugin" in _cr(run, "NicClusterPolicy").inputs["spec"]


def test_mi300x_with_the_nvidia_operator_is_refused_with_the_allowed_one() -> None:
    mi300x = parse_spec(azure_obj(MI300X))
    with pytest.raises(ValueError) as info:
        gpu_operator_for(mi300x, "nvidia")
    text = str(info.value)
    assert "'nvidia'" in text and MI300X in text and "allowed: 'amd'" in text
    with pytest.raises(ValueError, match="allowed: 'nvidia'"):
        gpu_operator_for(parse_spec(azure_obj(H100)), "amd")
    assert gpu_operator_for(mi300x, None) == "amd" and gpu_operator_for(parse_spec(azure_obj(H100)), None) == "nvidia"


def test_operator_namespaces_are_privileged_and_the_charts_wait_for_them(azure_run: Run) -> None:
    for itype in (H100, MI300X):
        run = azure_run(azure_obj(itype))
        spaces = {r.inputs["metadata"]["name"]: r for r in run.of_type("kubernetes:core/v1:Namespace")}
        for chart in run.of_type(CHART):
            if chart.inputs["namespace"] == "kube-system":
                # every cluster has it (the Pushgateway, components/k8s/metrics.py): nothing to make
                continue
            ns = spaces[chart.inputs["namespace"]]
            assert ns.urn in chart.dependencies, chart.name
        for name in ("network-operator", "gpu-operator") if itype == H100 else ("network-operator",):
            assert spaces[name].inputs["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": "privileged"}


def test_lustre_csi_goes_in_in_the_install_scripts_order_from_one_pinned_tag(azure_run: Run) -> None:
    run = azure_run()
    files = run.of_type("kubernetes:yaml/v2:ConfigFile")
    urls = [f.inputs["file"] for f in files]
    assert [u.rsplit("/", 1)[-1] for u in urls] == [
        "rbac-csi-azurelustre-controller.yaml",
        "rbac-csi-azurelustre-node.yaml",
        "csi-azurelustre-driver.yaml",
        "csi-azurelustre-controller.yaml",
        "csi-azurelustre-node-jammy.yaml",
        "csi-azurelustre-node-noble.yaml",
    ]
    assert all(
        u.startswith("https://raw.githubusercontent.com/kubernetes-sigs/azurelustre-csi-driver/v0.4.0/") for u in urls
    )
    for before, after in zip(files, files[1:]):
        assert before.urn in after.dependencies


def test_the_lustre_volume_is_the_stacks_file_system_and_its_claim_is_the_output(azure_run: Run) -> None:
    run = azure_run()
    out = read_outputs(run.outputs)
    pv = run.one("kubernetes:core/v1:PersistentVolume")
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    csi = pv.inputs["spec"]["csi"]
    assert csi["driver"] == "azurelustre.csi.azure.com"
    assert csi["volumeHandle"] == out.mount.volume_handle
    assert (
        csi["volumeAttributes"] == {"mgs-ip-address": azure_mocks.MOCK_MGS}
        and out.mount.dns_name == azure_mocks.MOCK_MGS
    )
    assert pv.inputs["spec"]["mountOptions"] == ["noatime", "flock"]
    assert pv.inputs["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv.inputs["spec"]["capacity"] == {"storage": "32768Gi"}
    assert (out.scheduler.namespace, out.scheduler.lustre_claim) == (JOB_NAMESPACE, pvc.inputs["metadata"]["name"])
    assert pvc.inputs["metadata"]["namespace"] == JOB_NAMESPACE
    assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
    ns = next(r for r in run.of_type("kubernetes:core/v1:Namespace") if r.inputs["metadata"]["name"] == JOB_NAMESPACE)
    noble = run.of_type("kubernetes:yaml/v2:ConfigFile")[-1]
    lustre = run.one("azure-native:storagecache:AmlFilesystem")
    assert {ns.urn, noble.urn, lustre.urn} <= set(pv.dependencies)
    assert pv.urn in pvc.dependencies


def test_jobset_runs_on_the_system_pool_and_every_object_goes_through_the_clusters_provider(azure_run: Run) -> None:
    run = azure_run()
    js = _charts(run)["oci://registry.k8s.io/jobset/charts/jobset"]
    assert js.inputs["values"] == {"controller": {"nodeSelector": {"agentpool": "ctrl"}}}
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    objects = [r for r in run.resources if r.type.startswith("kubernetes:") and r.custom]
    assert objects and all(r.provider.startswith(provider.urn) for r in objects)


def _tolerates(tolerations: list[dict[str, str]], taint: str) -> bool:
    """Whether a toleration list admits ``key=value:Effect`` (Kubernetes' matching: Exists matches
    any value, Equal the one value; an empty effect matches every effect)."""
    key, _, rest = taint.partition("=")
    value, _, effect = rest.partition(":")
    return any(
        t.get("key") in (key, None, "")
        and (t.get("operator", "Equal") == "Exists" or t.get("value") == value)
        and t.get("effect") in (effect, None, "")
        for t in tolerations
    )


def test_every_operand_that_runs_on_the_gpu_pool_tolerates_its_taint(azure_run: Run) -> None:
    # Chart defaults (read at the pins, components/k8s/aks.py) tolerate nvidia.com/gpu,
    # never the pool's sku taint: without ours the NFD worker never labels a GPU node, the
    # NicClusterPolicy's DOCA driver and SR-IOV plugin never run there, and no pod gets rdma/ib.
    for itype in (H100, MI300X):
        run = azure_run(azure_obj(itype))
        (taint,) = named(run, "azure-native:containerservice:AgentPool", "gpu-pool").inputs["nodeTaints"]
        charts = _charts(run)
        nfd = charts["network-operator"].inputs["values"]["node-feature-discovery"]["worker"]["tolerations"]
        assert _tolerates(nfd, taint), itype
        # The chart's own three stay (a Helm list replaces the chart's, so they are repeated).
        assert [t for t in nfd if t["key"] != "sku"] == list(layer.NETWORK_NFD_WORKER_TOLERATIONS)
        assert _tolerates(_cr(run, "NicClusterPolicy").inputs["spec"]["tolerations"], taint), itype
        if itype == H100:
            ds = charts["gpu-operator"].inputs["values"]["daemonsets"]["tolerations"]
            assert _tolerates(ds, taint) and _tolerates(ds, "nvidia.com/gpu=present:NoSchedule")
        else:
            # One NFD: AMD's chart runs none (the Network Operator's applies AMD's default rule).
            amd = charts["gpu-operator-charts"].inputs["values"]
            assert amd["node-feature-discovery"] == {"enabled": False} and amd["installdefaultNFDRule"] is True
            spec = _cr(run, "DeviceConfig").inputs["spec"]
            for got in (
                spec["devicePlugin"]["devicePluginTolerations"],
                spec["devicePlugin"]["nodeLabellerTolerations"],
                spec["metricsExporter"]["tolerations"],
            ):
                assert _tolerates(got, taint), itype
            assert spec["devicePlugin"]["enableNodeLabeller"] is True  # the reference's, kept
    # The check itself tells a missing toleration from a present one.
    assert not _tolerates(
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], "sku=gpu:NoSchedule"
    )


def test_the_amdgpu_installer_loads_the_driver_as_microsofts_mi300x_guide_does(tmp_path: Path) -> None:
    """Microsoft's MI300X guide (installation-guide.md at 85ebb69): hyperv_drm out, then amdgpu with
    ip_block_mask=0x7f; DKMS with the running kernel's headers; AMD's MI300X page (mi300x.rst at
    41afb32): NUMA balancing off, on every boot, the skip path included."""
    import subprocess

    from gpu_cluster.components.k8s.aks_amd import amd_driver_script

    script = amd_driver_script()
    path = tmp_path / "install-driver.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    lines = script.splitlines()

    def at(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    assert at("echo 0 > /proc/sys/kernel/numa_balancing") < at("already installed")
    assert "linux-headers-$(uname -r) amdgpu-dkms" in lines[at("apt-get install -y linux-headers")]
    assert (
        at("apt-get install -y linux-headers") < at("modprobe -r hyperv_drm") < at("modprobe amdgpu ip_block_mask=0x7f")
    )
    # The skip no longer asks modinfo for the release number, which the module does not carry.
    assert "modinfo" not in script and "dpkg-query -W -f='${Status}' amdgpu-dkms" in script


def _run_key_lines(tmp_path: Path, served: Path, fingerprint: str) -> Any:
    """The installer's key lines under bash, with ``wget`` answering from ``served`` (a PATH shim)
    and ``$keyring`` in ``tmp_path``; the real gpg does the rest."""
    import subprocess

    from gpu_cluster.components.k8s.aks_amd import rocm_key_lines

    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "wget").write_text(f'#!/bin/sh\n# wget -qO FILE URL\ncp {served} "$2"\n')
    (shim / "wget").chmod(0o755)
    script = "\n".join(["set -euo pipefail", f"keyring={tmp_path}/rocm.gpg", *rocm_key_lines(fingerprint)])
    env = {"PATH": f"{shim}:/usr/bin:/bin", "GNUPGHOME": str(tmp_path / "gnupg-verify")}
    (tmp_path / "gnupg-verify").mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)


def _throwaway_key(tmp_path: Path) -> tuple[Path, str]:
    """An armored public key made here with the real gpg, and its fingerprint."""
    import subprocess

    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Not AMD <not-amd@example.com>", "ed25519", "sign"],
        env=env,
        check=True,
        capture_output=True,
    )
    armored = subprocess.run(["gpg", "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    key = tmp_path / "served.key"
    key.write_bytes(armored)
    listing = subprocess.run(
        ["gpg", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True, text=True
    )
    fpr = next(line.split(":")[9] for line in listing.stdout.splitlines() if line.startswith("fpr:"))
    # Key generation started a gpg-agent for this home: stop it, so no process outlives the test.
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)
    return key, fpr


def test_a_rocm_key_that_is_not_amds_is_never_trusted(tmp_path: Path) -> None:
    from gpu_cluster.components.k8s.aks_amd import ROCM_KEY_FINGERPRINT

    served, fpr = _throwaway_key(tmp_path)
    done = _run_key_lines(tmp_path, served, ROCM_KEY_FINGERPRINT)
    assert done.returncode == 1
    assert f"has fingerprint {fpr}, not {ROCM_KEY_FINGERPRINT}: not trusted" in done.stderr
    assert not (tmp_path / "rocm.gpg").exists()


def test_the_pinned_key_is_written_dearmored_for_apt(tmp_path: Path) -> None:
    served, fpr = _throwaway_key(tmp_path)
    done = _run_key_lines(tmp_path, served, fpr)
    assert done.returncode == 0, done.stderr
    keyring = (tmp_path / "rocm.gpg").read_bytes()
    # gpg --dearmor writes the binary packet stream apt's signed-by reads (an OpenPGP public key packet).
    assert keyring and not keyring.startswith(b"-----BEGIN") and keyring[0] & 0x80


def test_the_installer_script_checks_the_key_before_writing_the_repository() -> None:
    from gpu_cluster.components.k8s.aks_amd import ROCM_KEY_FINGERPRINT, amd_driver_script

    lines = amd_driver_script().splitlines()
    check = next(i for i, line in enumerate(lines) if ROCM_KEY_FINGERPRINT in line and line.startswith("if"))
    repo = next(i for i, line in enumerate(lines) if "sources.list.d/amdgpu.list" in line and line.startswith("echo"))
    assert check < repo
