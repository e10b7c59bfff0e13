"""The pods and batch scripts the launcher renders per machine type, against what the upstream
reference setups have (the literals below are read from them, not from our catalog: the
source is named beside each), against the Kubernetes and JobSet schemas, and hardened."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpu_cluster.components.catalog import CatalogError, load_catalog, load_fabric_facts
from gpu_cluster.components.contract import ClusterOutputs, Fabric
from gpu_cluster.workloads.launch import fabric as fw
from gpu_cluster.workloads.launch import jobset, sbatch
from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch.validation import (
    EFA_POD_CPU,
    ValidationJob,
    check_networks,
    jobset_spec,
    sbatch_spec,
)
from tests.launch.test_jobset import K8S_VERSIONS, _crd_errors, _pod
from tests.launch.test_jobset import jobset_schema as jobset_schema  # the fixture, by its name

TYPES = ["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g", "p5.48xlarge", "p5en.48xlarge"]


def _render(instance_type: str) -> tuple[dict[str, Any], str]:
    job = ValidationJob(nodes=2, workdir="/fsx/validation/c1/r1", instance_type=instance_type)
    efa = load_catalog().get(instance_type).network.efa_interfaces
    spec = jobset_spec(
        job,
        image="registry.example/validate:1",
        lustre_pvc="lustre",
        namespace="gpuc-jobs",
        efa_per_node=efa,
        cpu=EFA_POD_CPU if efa else None,
    )
    return jobset.render(spec), jobset.pod_script(spec)


def _pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec


def _annotations(manifest: dict[str, Any]) -> dict[str, str]:
    meta: dict[str, Any] = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    return dict(meta.get("annotations", {}))


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"].replace("$$", "$") for e in container["env"]}


@pytest.mark.parametrize("instance_type", TYPES)
def test_pod_is_valid_kubernetes_and_jobset(instance_type: str, jobset_schema: dict[str, Any]) -> None:
    manifest, _ = _render(instance_type)
    assert _crd_errors(jobset_schema, manifest) == []
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(_pod(manifest), version, strict=True)
        policy = jobset.network_policy(
            jobset_spec(
                ValidationJob(nodes=2, workdir="/w", instance_type=instance_type),
                image="i:1",
                lustre_pvc=None,
                namespace="gpuc-jobs",
            )
        )
        kubernetes_validate.validate(policy, version, strict=True)


@pytest.mark.parametrize("instance_type", TYPES)
def test_every_container_is_hardened(instance_type: str) -> None:
    manifest, _ = _render(instance_type)
    pod = _pod_spec(manifest)
    assert pod["automountServiceAccountToken"] is False  # CKV_K8S_38
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}  # CKV_K8S_31
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        sc = c["securityContext"]  # CKV_K8S_29/30
        assert sc["allowPrivilegeEscalation"] is False  # CKV_K8S_20
        # The workload and the node gate drop ALL (CKV_K8S_28, 37); the receive-datapath sidecar keeps
        # the runtime's defaults and adds its own, as upstream (the deliberate CKV_K8S_37 exception).
        drops = c in pod["containers"] or c["name"] == "wait-for-node"
        assert sc["capabilities"]["drop"] == ["ALL"] if drops else "drop" not in sc["capabilities"]
        assert not {"SYS_ADMIN", "NET_RAW"} & set(sc["capabilities"].get("add", []))
        assert "privileged" not in sc
    assert manifest["metadata"]["namespace"] == "gpuc-jobs"  # CKV_K8S_21 when the stack's namespace is its own


def test_policy_admits_only_the_jobs_own_pods() -> None:
    spec = jobset_spec(ValidationJob(nodes=2, workdir="/w", instance_type="p5.48xlarge"), image="i:1", lustre_pvc=None)
    manifest, policy = jobset.render(spec), jobset.network_policy(spec)
    labels = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    sel = policy["spec"]["podSelector"]["matchLabels"]
    assert sel.items() <= labels.items() and sel["app.kubernetes.io/name"] == spec.name
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": sel}}]}]


def test_a3_mega_tcpxo_pod_has_what_the_reference_pod_has() -> None:
    manifest, script = _render("a3-megagpu-8g")
    ann, pod = _annotations(manifest), _pod_spec(manifest)
    # container-engine-accelerators gpudirect-tcpxo/nccl-test-latest.yaml at 992db81.
    assert ann["networking.gke.io/default-interface"] == "eth0"
    assert json.loads(ann["networking.gke.io/interfaces"]) == [
        {"interfaceName": "eth0", "network": "default"},
        *[{"interfaceName": f"eth{i}", "network": f"vpc{i}"} for i in range(1, 9)],
    ]
    devices = [d["path"] for d in yaml.safe_load(ann["devices.gke.io/container.tcpxo-daemon"])]
    assert devices == [
        *[f"/dev/nvidia{i}" for i in range(8)],
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/dmabuf_import_helper",
    ]
    # The node gate first (the installer's plugin and aperture devices), then the sidecar.
    gate, rxdm = pod["initContainers"]
    assert gate["name"] == "wait-for-node" and "restartPolicy" not in gate
    waits = {e["name"]: e.get("value") for e in gate["env"]}["GPUC_WAIT_FOR"].split()
    assert "/usr/local/nvidia/lib64/libnccl-net.so" in waits and "/dev/aperture_devices/" in waits
    assert rxdm["name"] == "tcpxo-daemon" and rxdm["restartPolicy"] == "Always"  # native sidecar (best-practice.md)
    assert rxdm["image"].startswith("us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21")
    assert "/fts/entrypoint_rxdm_container.sh --num_hops=2" in rxdm["command"][2]
    # On top of the runtime's defaults, no drop (nccl-test-latest.yaml at 992db81; cluster-toolkit
    # enable-tcpxo-in-workload.py at 1047080); the startup probe as best-practice.md gives it, with
    # as many tries as Google's Slurm prolog waits for the same daemon (slurm-gcp, 60 x 2 s = 120 s),
    # not the sample's 6 (31 s, for an initialisation best-practice.md says takes about 30 s).
    assert rxdm["securityContext"]["capabilities"] == {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}
    probe = rxdm["startupProbe"]
    assert (probe["initialDelaySeconds"], probe["periodSeconds"], probe["timeoutSeconds"]) == (1, 5, 1)
    assert (probe["successThreshold"], probe["failureThreshold"]) == (1, 24)
    budget = probe["initialDelaySeconds"] + probe["periodSeconds"] * probe["failureThreshold"]
    assert budget >= load_fabric_facts()[0]["tcpxo"].rxdm_wait_s == 120
    assert probe["exec"]["command"] == ["cat", "/run/health-check"]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: vols[m["name"]] for m in rxdm["volumeMounts"]}
    assert {p: v["hostPath"]["path"] for p, v in mounts.items()} == {
        "/usr/local/nvidia": "/home/kubernetes/bin/nvidia",
        "/hostsysfs": "/sys",
        "/hostprocsysfs": "/proc/sys",
    }
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in rxdm["env"]
    assert rxdm["startupProbe"]["exec"]["command"] == ["cat", "/run/health-check"]
    (c,) = pod["containers"]
    main = {
        m["mountPath"]: vols[m["name"]]
        for m in c["volumeMounts"]
        if m["name"] in vols and "hostPath" in vols[m["name"]]
    }
    assert main["/dev/aperture_devices"]["hostPath"]["path"] == "/dev/aperture_devices"
    assert main["/usr/local/nvidia"]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
    env = _env(c)
    assert env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"
    assert 'export LD_LIBRARY_PATH=/usr/local/nvidia/lib64"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' in script
    # google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile.sh at v1.0.15, NCCL_LIB_DIR=/usr/local/nvidia/lib64.
    profile = {
        "NCCL_FASTRAK_IFNAME": "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8",
        "NCCL_FASTRAK_CTRL_DEV": "eth0",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_CROSS_NIC": "0",
        "NCCL_PROTO": "Simple,LL128",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
        "NCCL_P2P_NET_CHUNKSIZE": "524288",
        "NCCL_P2P_PCI_CHUNKSIZE": "524288",
        "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
        "NCCL_FASTRAK_NUM_FLOWS": "2",
        "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
        "NCCL_BUFFSIZE": "8388608",
        "NCCL_FASTRAK_USE_SNAP": "1",
        "NCCL_FASTRAK_USE_LLCM": "1",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
        "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
        "NCCL_TUNER_CONFIG_PATH": "/usr/local/nvidia/lib64/a3plus_tuner_config.textproto",
        "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": "/usr/local/nvidia/lib64/a3plus_guest_config.textproto",
        "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
    }
    assert {k: env.get(k) for k in profile} == profile
    assert env["NCCL_DEBUG"] == "INFO" and "NCCL_ALGO" not in env  # the profile leaves NCCL_ALGO unset


def test_a3_high_tcpx_pod_has_what_the_reference_pod_has() -> None:
    manifest, script = _render("a3-highgpu-8g")
    ann, pod = _annotations(manifest), _pod_spec(manifest)
    # container-engine-accelerators gpudirect-tcpx/nccl-test-latest.yaml at 992db81.
    assert json.loads(ann["networking.gke.io/interfaces"])[1:] == [
        {"interfaceName": f"eth{i}", "network": f"vpc{i}"} for i in range(1, 5)
    ]
    assert "/dev/dmabuf_import_helper" not in ann["devices.gke.io/container.tcpx-daemon"]
    gate, rxdm = pod["initContainers"]
    assert gate["name"] == "wait-for-node"
    assert rxdm["image"].startswith("us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12")
    assert rxdm["command"][:3] == ["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm"]
    assert rxdm["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    (c,) = pod["containers"]
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    vols = {v["name"]: v for v in pod["volumes"]}
    socket = {m["mountPath"] for m in [*rxdm["volumeMounts"], *c["volumeMounts"]] if m["name"] == "tcpx-socket"}
    assert socket == {"/run/tcpx", "/tmp"} and vols["tcpx-socket"] == {"name": "tcpx-socket", "emptyDir": {}}
    env = _env(c)
    assert (
        env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
        and env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] == "eth0"
    )
    assert env["NCCL_GPUDIRECTTCPX_TX_BINDINGS"].startswith("eth1:8-21,112-125;")


@pytest.mark.parametrize("instance_type", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_gib_pod_has_what_the_reference_pod_has(instance_type: str) -> None:
    manifest, script = _render(instance_type)
    ann, pod = _annotations(manifest), _pod_spec(manifest)
    # cluster-toolkit examples/gke-a3-ultragpu/nccl-jobset-example.yaml and gke-a4/ at 1047080.
    assert json.loads(ann["networking.gke.io/interfaces"]) == [
        {"interfaceName": "eth0", "network": "default"},
        *[{"interfaceName": f"eth{i + 2}", "network": f"rdma-{i}"} for i in range(8)],
    ]
    # No sidecar: only the node gate, waiting for the gIB installer's tree.
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-node"]
    assert not any(k.startswith("devices.gke.io") for k in ann)
    vols = {v["name"]: v for v in pod["volumes"]}
    (c,) = pod["containers"]
    host = {
        m["mountPath"]: vols[m["name"]]["hostPath"]["path"] for m in c["volumeMounts"] if "hostPath" in vols[m["name"]]
    }
    assert host == {"/usr/local/gib": "/home/kubernetes/bin/gib", "/usr/local/nvidia": "/home/kubernetes/bin/nvidia"}
    assert _env(c)["NCCL_NET"] == "gIB"
    assert "source /usr/local/gib/scripts/set_nccl_env.sh" in script
    # The launcher's NCCL_DEBUG (what the transport check reads) is exported again after the script.
    after = script.split("source /usr/local/gib/scripts/set_nccl_env.sh", 1)[1]
    assert "export NCCL_DEBUG=INFO" in after and "export NCCL_NET=gIB" in after
    assert after.index("export NCCL_NET=gIB") < after.index("torch.distributed.run")
    assert c.get("securityContext", {}).get("capabilities", {}).get("add") is None


@pytest.mark.parametrize(("instance_type", "efa"), [("p5.48xlarge", "32"), ("p5en.48xlarge", "16")])
def test_efa_pod_has_devices_root_and_the_plugin_on_the_library_path(instance_type: str, efa: str) -> None:
    manifest, script = _render(instance_type)
    (c,) = _pod_spec(manifest)["containers"]
    # EFA counts: the AWS efa-acc-inst-types page (32 on p5, 16 on p5en). No hugepages: nothing
    # read shows the node reserving any, and an unmet request leaves the pod Pending.
    assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == efa
    assert not any(k.startswith("hugepages-") for k in c["resources"]["limits"])
    # Found in the image at start: the default DLC image's plugin directory (lib64), EFA installer
    # 1.44+ on Ubuntu's (lib: aws/deep-learning-containers install_efa.sh at 2f60860) or an older
    # installer's (awsome-distributed-training kubernetes/nccl-tests.yaml at 7217859), libfabric's first.
    assert "for gpuc_cand in /opt/amazon/efa/lib64 /opt/amazon/efa/lib; do" in script
    assert (
        "for gpuc_cand in /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu; do"
        in script
    )
    assert 'export LD_LIBRARY_PATH="$gpuc_found_libs""${LD_LIBRARY_PATH:+' in script
    env = _env(c)
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_NET_PLUGIN"] == "ofi" and not _annotations(manifest)
    # Root with IPC_LOCK and nothing else added: the run directory goes under the root-owned
    # Lustre mount, and the EFA provider pins its bounce buffers past the memlock limit, which
    # only an effective CAP_IPC_LOCK allows (catalog fabrics.efa.pod.run_as_root, capabilities).
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert (c["securityContext"]["runAsUser"], c["securityContext"]["runAsNonRoot"]) == (0, False)


def test_slurm_efa_job_finds_the_host_plugin_and_puts_it_on_the_library_path() -> None:
    script = sbatch.render(sbatch_spec(ValidationJob(nodes=2, workdir="/fsx/v", instance_type="p5.48xlarge")))
    # lib64 first (the PCS sample AMI: AL2023, EFA installer 1.47.0), then the DLAMI's lib
    # (awsome-distributed-training nccl-tests-ami.sbatch at 7217859); the tuner only where it is.
    assert "for gpuc_cand in /opt/amazon/ofi-nccl/lib64 /opt/amazon/ofi-nccl/lib; do" in script
    line = 'export LD_LIBRARY_PATH="$gpuc_found_libs""${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"'
    assert line in script and script.index(line) < script.index("srun")
    assert 'export NCCL_TUNER_PLUGIN="$gpuc_dir"/libnccl-ofi-tuner.so' in script
    assert "NCCL_TUNER_PLUGIN=/opt/amazon" not in script


@pytest.mark.parametrize("instance_type", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_slurm_gib_job_finds_the_nodes_nics_and_sources_the_gib_script(instance_type: str) -> None:
    script = sbatch.render(sbatch_spec(ValidationJob(nodes=2, workdir="/fsx/v", instance_type=instance_type)))
    # cluster-toolkit examples/machine-learning/a3-ultragpu-8g/nccl-tests/run-nccl-tests.sh at 1047080:
    # the script sourced, then NCCL_NET and the NICs; here the NICs and the root are the node's own
    # (catalog fabrics.rdma.slurm.discover; tests/launch/test_discover.py runs them).
    after = script.split('source "$gpuc_plugin_root"/scripts/set_nccl_env.sh', 1)[1]
    assert "export NCCL_NET=gIB" in after and "export NCCL_SOCKET_IFNAME=$gpuc_nics" in after
    assert "enp0s19" not in script and "eth0,eth1" not in script
    assert 'export LD_LIBRARY_PATH="$gpuc_plugin_root"/lib64"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' in script
    assert script.index("gpuc_plugin_root=") < script.index("export LD_LIBRARY_PATH=")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_env_script_is_sourced_then_the_launchers_values_win(tmp_path: Path) -> None:
    good = tmp_path / "set_env.sh"
    good.write_text("export NCCL_DEBUG=WARN\nexport FROM_SCRIPT=1\n")
    lines = fw.shell_lines(library_path=("/opt/a", "/opt/b"), env_script=str(good), reexport={"NCCL_DEBUG": "INFO"})
    body = "\n".join(
        ["set -euo pipefail", "LD_LIBRARY_PATH=/old", *lines, 'echo "$NCCL_DEBUG $FROM_SCRIPT $LD_LIBRARY_PATH"']
    )
    done = subprocess.run(["bash", "-c", body], capture_output=True, text=True)
    assert done.stdout.strip() == "INFO 1 /opt/a:/opt/b:/old", done.stderr
    missing = fw.shell_lines(library_path=(), env_script=str(tmp_path / "nope.sh"), reexport={})
    done = subprocess.run(
        ["bash", "-c", "\n".join(["set -euo pipefail", *missing, "echo reached"])], capture_output=True, text=True
    )
    assert done.returncode == 1 and "nope.sh is missing" in done.stderr and "reached" not in done.stdout


def _outputs(networks: list[str]) -> ClusterOutputs:
    from gpu_cluster.components.contract import Access, Mount, Scheduler

    return ClusterOutputs(
        cloud="gcp",
        region="r",
        zone="z",
        orchestrator="gke",
        cluster_name="c",
        instance_type="a3-megagpu-8g",
        nodes=2,
        gpus_per_node=8,
        fabric=Fabric(
            type="tcpxo", interfaces_per_node=8, placement=None, mtu=8244, networks=tuple({"name": n} for n in networks)
        ),
        mount=Mount(mount_point="/lustre", dns_name="d", mount_name="m", mount_command="c"),
        bucket="b",
        access=Access(kubeconfig="k"),
        scheduler=Scheduler(kind="kubernetes", namespace="ns"),
    )


def test_pod_interfaces_must_name_networks_the_stack_made() -> None:
    wired = fw.wiring("tcpxo").pod
    check_networks(_outputs([f"vpc{i}" for i in range(1, 9)]), wired)
    with pytest.raises(LaunchSpecError) as err:
        check_networks(_outputs(["gpu-nic0", "vpc1"]), wired)
    assert err.value.fields() == ["fabric.networks"] and "vpc2" in str(err.value) and "gpu-nic0" in str(err.value)


def _doc(**pod: Any) -> dict[str, Any]:
    return {"sources": {"s": {}}, "fabrics": {"f": {"pod": {"source": "s", **pod}}}}


@pytest.mark.parametrize(
    ("pod", "path"),
    [
        ({"capabilities": [{"add": "SYS_ADMIN", "reason": "x"}]}, "fabrics.f.pod.capabilities[0].add"),
        ({"capabilities": [{"add": "IPC_LOCK"}]}, "fabrics.f.pod.capabilities[0].reason"),
        ({"mounts": {"nowhere": "/x"}}, "fabrics.f.pod.mounts['nowhere']"),
        ({"sidecar": {"name": "d", "command": ["x"]}}, "fabrics.f.rxdm"),
    ],
)
def test_a_bad_wiring_entry_is_named_by_its_catalog_path(pod: dict[str, Any], path: str) -> None:
    with pytest.raises(CatalogError, match=path.replace("[", r"\[").replace("]", r"\]")):
        fw.parse(_doc(**pod))
    assert fw.parse(_doc())["f"].pod.annotations() == {}


def test_run_as_user_makes_the_workload_non_root_and_leaves_the_daemon_root() -> None:
    job = ValidationJob(nodes=2, workdir="/w", instance_type="a3-megagpu-8g")
    pod = _pod_spec(jobset.render(replace(jobset_spec(job, image="i:1", lustre_pvc=None), run_as_user=1000)))
    (c,) = pod["containers"]
    assert c["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["runAsUser"] == 1000  # CKV_K8S_23
    assert "runAsNonRoot" not in pod["securityContext"] and pod["securityContext"]["fsGroup"] == 1000
    (rxdm,) = [c for c in pod["initContainers"] if c["name"] == "tcpxo-daemon"]
    assert "runAsNonRoot" not in rxdm["securityContext"]
    with pytest.raises(LaunchSpecError, match="run_as_user"):
        jobset.validate(replace(jobset_spec(job, image="i:1", lustre_pvc=None), run_as_user=0))
