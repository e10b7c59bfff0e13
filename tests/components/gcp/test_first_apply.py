"""What a first `pulumi up` on a fresh project needs, checked on the offline plan against the
reference values (container-engine-accelerators at 992db81, cluster-toolkit at 1047080, Google's
consumption-option docs): the NCCL plugin installers and the NRI device injector as upstream
writes them, the system pool, the maintenance exclusion, the APIs before everything else, the
capacity GCP offers, the checkpoint bucket reachable from GKE jobs."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.catalog import installer_fact, rxdm_fact
from gpu_cluster.components.k8s.addons import JOB_NAMESPACE
from gpu_cluster.components.spec import SpecError, parse_spec
from tests.components.gcp.conftest import PROJECT, TEST_DIGEST, gcp_obj, named, supplied_installer
from tests.launch.test_checkov_k8s import checkov as checkov  # the fixture, by its name

DS = "kubernetes:apps/v1:DaemonSet"


def _pod(run: OfflineRun, ds: str) -> dict[str, Any]:
    spec: dict[str, Any] = named(run, DS, ds).inputs["spec"]["template"]["spec"]
    return spec


def _host_paths(pod: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}


def test_catalog_pairs_the_tcpxo_plugin_with_its_receive_datapath_release() -> None:
    # gpudirect-tcpxo/README.md "Jan 9, 2026": plugin v1.0.15 with tcpgpudmarxd-dev v1.0.21.
    inst, rxdm = installer_fact("tcpxo"), rxdm_fact("tcpxo")
    assert rxdm is not None
    assert (inst.tag, rxdm.tag) == ("v1.0.15", "v1.0.21")
    assert inst.ref == f"{inst.image}:v1.0.15@sha256:4c9f0de3f39455a2ea35e844e0fc92564ca5629f6b03250fde40e8160719dae4"
    assert rxdm.ref.endswith(":v1.0.21@sha256:8d9e10fd589a34ab8a0aa64f7e70ad075c8f1c69bea176350f8d211367697e3d")
    assert installer_fact("rdma").tag == "v1.1.1" and rxdm_fact("rdma") is None
    assert (installer_fact("tcpx").tag, getattr(rxdm_fact("tcpx"), "tag", None)) == ("v3.1.9", "v2.0.12")


def test_tcpxo_installer_puts_the_plugin_on_the_host_after_the_pre_installation(
    offline: Callable[..., OfflineRun],
) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    pod = _pod(run, "nccl-tcpxo-installer")
    assert pod["hostNetwork"] is True and pod["hostPID"] is True  # nsenter into PID 1
    assert pod["priorityClassName"] == "system-node-critical"
    assert _host_paths(pod) == {
        "var-lib": "/var/lib",
        "tcpxo": "/var/lib/tcpxo",
        "library-dir-host": "/home/kubernetes/bin",
    }
    pre, inst = pod["initContainers"]
    assert pre["name"] == "pre-installation" and pre["securityContext"] == {"privileged": True}
    assert pre["command"][:5] == ["nsenter", "-at", "1", "--", "sh"]
    script = pre["command"][-1]
    for step in (
        "/sbin/iptables -I INPUT -p tcp -m tcp -j ACCEPT",
        "modprobe import-helper",
        "mkdir -p /dev/aperture_devices",
        "1ae0:0084",
        "mount --bind",
        "chmod -R a+r /dev/aperture_devices/",
    ):
        assert step in script, step
    assert "@sha256:" in pre["image"]
    assert inst["image"] == installer_fact("tcpxo").ref
    assert {m["name"]: m["mountPath"] for m in inst["volumeMounts"]} == {
        "var-lib": "/var/lib",
        "library-dir-host": "/usr/local",
    }
    assert inst["command"] == ["/bin/sh", "-c"]
    assert "/scripts/container_entry.sh install --install-nccl" in inst["args"][0]
    assert "cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64" in inst["args"][0]
    assert pod["containers"][0]["image"].startswith("gke.gcr.io/pause:3.8@sha256:")


def test_tcpx_installer_has_no_pre_installation(offline: Callable[..., OfflineRun]) -> None:
    pod = _pod(offline(gcp_obj("a3-highgpu-8g")), "nccl-tcpx-installer")
    [inst] = pod["initContainers"]
    assert _host_paths(pod) == {
        "var-lib": "/var/lib",
        "tcpx": "/var/lib/tcpx",
        "library-dir-host": "/home/kubernetes/bin",
    }
    assert "cp -r /var/lib/tcpx/lib64/. /usr/local/nvidia/lib64" in inst["args"][0]
    # By the digest the stack supplies (no published reference gives one for v3.1.9).
    assert inst["image"] == supplied_installer("a3-highgpu-8g")
    assert inst["image"].startswith(
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9@"
    )


@pytest.mark.parametrize(
    "itype,accelerator", [("a3-ultragpu-8g", "nvidia-h200-141gb"), ("a4-highgpu-8g", "nvidia-b200")]
)
def test_gib_installer_writes_where_pods_read(itype: str, accelerator: str, offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj(itype, compute={"instance_type": itype, "nodes": 2, "capacity": {"type": "spot"}}))
    pod = _pod(run, "nccl-rdma-installer")
    fact = installer_fact("rdma")
    assert _host_paths(pod) == {"library-dir-host": fact.host_paths["lib64"], "gib": fact.host_paths["gib"]}
    assert pod["volumes"][0]["hostPath"]["type"] == "DirectoryOrCreate"
    [inst] = pod["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in inst["volumeMounts"]}
    assert mounts == {
        "library-dir-host": "/usr/local/home/kubernetes/bin/nvidia/lib64",
        "gib": "/usr/local/home/kubernetes/bin/gib",
    }
    # The NCCL core comes with the plugin's release, copied with it into the pods' first library
    # directory: cluster-toolkit's A3 Ultra and A4 installers (examples/gke-a3-ultragpu/ and
    # gke-a4/nccl-installer.yaml.tftpl at 1047080) run exactly these three lines.
    script = inst["args"][0].splitlines()
    assert script[1:4] == [
        "/scripts/container_entry.sh install --install-nccl",
        "cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64",
        "cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib",
    ]
    assert fact.install_nccl
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0]["values"] == [accelerator]
    # gIB needs no receive-datapath sidecar, so no device injector
    assert [d.inputs["metadata"]["name"] for d in run.of_type(DS)] == ["nccl-rdma-installer"]


@pytest.mark.parametrize("itype", ["a3-highgpu-8g", "a3-megagpu-8g"])
def test_nri_device_injector_for_tcpx_and_tcpxo(itype: str, offline: Callable[..., OfflineRun]) -> None:
    pod = _pod(offline(gcp_obj(itype)), "device-injector")
    [c] = pod["containers"]
    assert c["image"].startswith("gcr.io/gke-release/nri-device-injector@sha256:6e79483d")
    assert c["securityContext"] == {"privileged": True}
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]} == {"dev": "/dev", "nri": "/var/run/nri"}
    assert _host_paths(pod) == {"nri": "/var/run/nri", "dev": "/dev"}
    assert pod["hostPID"] is True and pod["tolerations"] == [{"operator": "Exists"}]


def test_system_pool_and_maintenance_exclusion(offline: Callable[..., OfflineRun]) -> None:
    run = offline(
        gcp_obj(
            "a3-megagpu-8g", compute={"instance_type": "a3-megagpu-8g", "nodes": 2, "capacity": {"type": "flex-start"}}
        )
    )
    sys_pool = named(run, "gcp:container/nodePool:NodePool", "-orchestration-system").inputs
    assert (
        sys_pool["nodeConfig"]["machineType"] == "e2-standard-4" and "guestAccelerators" not in sys_pool["nodeConfig"]
    )
    assert sys_pool["autoscaling"] == {"totalMinNodeCount": 2, "totalMaxNodeCount": 10}
    assert "taints" not in sys_pool["nodeConfig"]  # the JobSet chart schedules there without tolerations
    assert sys_pool["cluster"] == "t1-orchestration-gke-id"
    policy = run.one("gcp:container/cluster:Cluster").inputs["maintenancePolicy"]
    assert policy["dailyMaintenanceWindow"] == {"startTime": "09:00"}
    assert policy["maintenanceExclusions"] == [
        {
            "exclusionName": "no-minor-or-node-upgrades-indefinite",
            "startTime": "2025-12-01T00:00:00Z",
            "exclusionOptions": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"},
        }
    ]


@pytest.mark.parametrize(
    "kind,apis",
    [
        (
            "gke",
            {
                "compute",
                "servicenetworking",
                "lustre",
                "storage",
                "iam",
                "cloudresourcemanager",
                "container",
                "binaryauthorization",
                # Managed Service for Prometheus writes there (components/gcp/metrics.py)
                "monitoring",
            },
        ),
        (
            "slurm",
            {
                "compute",
                "servicenetworking",
                "lustre",
                "storage",
                "iam",
                "cloudresourcemanager",
                "hypercomputecluster",
                "file",
            },
        ),
    ],
)
def test_apis_are_enabled_and_every_cloud_resource_waits_for_them(
    kind: str, apis: set[str], offline: Callable[..., OfflineRun]
) -> None:
    run = offline(gcp_obj("a3-ultragpu-8g", kind=kind))
    services = run.of_type("gcp:projects/service:Service")
    assert {s.inputs["service"] for s in services} == {f"{a}.googleapis.com" for a in apis}
    assert all(s.inputs["disableOnDestroy"] is False and s.inputs["project"] == PROJECT for s in services)
    [provider] = run.of_type("pulumi:providers:gcp")
    assert provider.inputs["project"] == PROJECT
    # every Google resource but the Service ones goes through that provider
    others = [
        r for r in run.resources if r.custom and r.type.startswith("gcp:") and r.type != "gcp:projects/service:Service"
    ]
    assert others and all(r.provider.startswith(provider.urn) for r in others), [
        r.name for r in others if not r.provider.startswith(provider.urn)
    ]


@pytest.mark.parametrize("itype", ["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"])
def test_on_demand_gpu_capacity_is_refused_with_the_options(itype: str) -> None:
    obj = gcp_obj(itype, compute={"instance_type": itype, "nodes": 2, "capacity": {"type": "on-demand"}})
    with pytest.raises(SpecError) as info:
        parse_spec(obj)
    [(path, reason)] = info.value.problems
    assert path == "compute.capacity.type" and "allowed: reservation, flex-start, spot" in reason


def test_cluster_director_offers_no_a3_high_and_no_on_demand() -> None:
    obj = gcp_obj(
        "a3-highgpu-8g",
        kind="slurm",
        compute={"instance_type": "a3-highgpu-8g", "nodes": 2, "capacity": {"type": "spot"}},
    )
    with pytest.raises(SpecError) as info:
        parse_spec(obj)
    assert info.value.problems == [
        (
            "compute.instance_type",
            "Cluster Director (orchestration.kind: slurm) does not "
            "offer a3-highgpu-8g (allowed: a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g)",
        )
    ]
    obj = gcp_obj(
        "a4-highgpu-8g",
        kind="slurm",
        compute={"instance_type": "a4-highgpu-8g", "nodes": 2, "capacity": {"type": "on-demand"}},
    )
    with pytest.raises(SpecError) as info:
        parse_spec(obj)
    [(path, reason)] = info.value.problems
    assert (
        path == "compute.capacity.type" and "N2 only" in reason and "allowed: reservation, flex-start, spot" in reason
    )


def test_checkpoint_bucket_is_mounted_from_gke_through_workload_identity(offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj("a3-megagpu-8g"))
    bucket = run.outputs["bucket"]
    account = named(run, "gcp:serviceaccount/account:Account", "-orchestration-jobs").inputs
    email = f"{account['accountId']}@offline-project.iam.gserviceaccount.com"
    grant = named(run, "gcp:storage/bucketIAMMember:BucketIAMMember", "-orchestration-jobs-bucket").inputs
    assert grant == {"bucket": bucket, "role": "roles/storage.objectUser", "member": f"serviceAccount:{email}"}
    wi = run.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert wi["role"] == "roles/iam.workloadIdentityUser"
    assert wi["member"] == f"serviceAccount:{PROJECT}.svc.id.goog[{JOB_NAMESPACE}/workload-identity-k8s-sa]"
    ksa = run.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]
    assert ksa["namespace"] == JOB_NAMESPACE == run.outputs["scheduler"]["namespace"]
    assert ksa["name"] == "workload-identity-k8s-sa" and ksa["annotations"] == {"iam.gke.io/gcp-service-account": email}
    pv = named(run, "kubernetes:core/v1:PersistentVolume", "-checkpoints-pv").inputs["spec"]
    assert pv["csi"] == {"driver": "gcsfuse.csi.storage.gke.io", "volumeHandle": bucket}
    assert pv["accessModes"] == ["ReadWriteMany"] and pv["persistentVolumeReclaimPolicy"] == "Retain"
    claim = named(run, "kubernetes:core/v1:PersistentVolumeClaim", "-checkpoints-pvc").inputs
    assert claim["metadata"]["namespace"] == JOB_NAMESPACE
    assert claim["spec"]["volumeName"] == claim["metadata"]["name"] == run.outputs["scheduler"]["checkpoint_claim"]
    assert run.outputs["scheduler"]["service_account"] == "workload-identity-k8s-sa"
    assert run.one("gcp:container/cluster:Cluster").inputs["addonsConfig"]["gcsFuseCsiDriverConfig"] == {
        "enabled": True
    }


@pytest.mark.parametrize(
    "change,path,word",
    [
        ({"digest": "sha256:abc"}, "fabrics.tcpxo.installer.digest", "64 hex digits"),
        ({"source": "nowhere"}, "fabrics.tcpxo.installer.source", "unknown source id"),
        ({"tag": None}, "fabrics.tcpxo.installer.tag", "missing"),
    ],
)
def test_installer_fact_refuses_a_malformed_entry(
    change: dict[str, Any], path: str, word: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_cluster.components import catalog, catalog_fabrics

    real = catalog_fabrics._fabric_images()
    fabrics = {
        **real["fabrics"],
        "tcpxo": {**real["fabrics"]["tcpxo"], "installer": {**real["fabrics"]["tcpxo"]["installer"], **change}},
    }
    monkeypatch.setattr(catalog_fabrics, "_fabric_images", lambda: {"fabrics": fabrics, "sources": real["sources"]})
    with pytest.raises(catalog.CatalogError) as info:
        catalog.installer_fact("tcpxo")
    assert str(info.value).startswith(path) and word in str(info.value)
    with pytest.raises(catalog.CatalogError, match="fabrics with one: tcpx, tcpxo, rdma"):
        catalog.installer_fact("efa")


@pytest.mark.parametrize("itype", ["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g"])
def test_in_cluster_objects_are_valid_kubernetes(itype: str, offline: Callable[..., OfflineRun]) -> None:
    import kubernetes_validate

    run = offline(gcp_obj(itype))
    kinds = (
        "kubernetes:apps/v1:DaemonSet",
        "kubernetes:core/v1:PersistentVolume",
        "kubernetes:core/v1:PersistentVolumeClaim",
        "kubernetes:core/v1:ServiceAccount",
        "kubernetes:core/v1:Namespace",
    )
    objects = [r.inputs for r in run.resources if r.type in kinds]
    assert {o["kind"] for o in objects} == {
        "DaemonSet",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "ServiceAccount",
        "Namespace",
    }
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
    broken = copy.deepcopy(next(o for o in objects if o["kind"] == "DaemonSet"))
    broken["spec"]["template"]["spec"]["hostPid"] = True  # misspelt: the check can fail
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33.0", strict=True)


# gcp-h100-gke (A3 Mega) and gcp-b200-gke (A4) are multi-node flex-start: queued, so no COMPACT policy
# (components/gcp/rules.py).
@pytest.mark.parametrize(
    "stack,placed",
    [("gcp-h100-gke", False), ("gcp-h200-gke", False), ("gcp-b200-gke", False), ("gcp-h200-slurm", False)],
)
def test_plan_summary_says_compact_placement_only_where_one_is_created(stack: str, placed: bool) -> None:
    import io

    from gpu_cluster.components.plan import plan_stack, render

    summary, run = plan_stack(stack)
    assert summary.placement is placed
    assert bool(run.of_type("gcp:compute/resourcePolicy:ResourcePolicy")) is placed
    out = io.StringIO()
    render(summary, run, out)
    line = next(ln for ln in out.getvalue().splitlines() if ln.strip().startswith("interconnect"))
    assert ("no compact placement policy" not in line) is placed, line


@pytest.mark.parametrize(
    "itype,ds",
    [
        ("a3-megagpu-8g", "nccl-tcpxo-installer"),
        ("a3-megagpu-8g", "device-injector"),
        ("a3-ultragpu-8g", "nccl-rdma-installer"),
    ],
)
def test_host_daemons_are_hardened_but_for_the_host_access_they_name(
    itype: str, ds: str, offline: Callable[..., OfflineRun]
) -> None:
    run = offline(gcp_obj(itype, compute={"instance_type": itype, "nodes": 2, "capacity": {"type": "spot"}}))
    daemonset = named(run, DS, ds).inputs
    template = daemonset["spec"]["template"]
    pod = template["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for c in pod["containers"]:
        if c["name"] == "pause":
            assert c["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["capabilities"] == {
                "drop": ["ALL"]
            }
    waived = {
        v.split("=", 1)[0]: v.split("=", 1)[1]
        for k, v in daemonset["metadata"]["annotations"].items()
        if k.startswith("checkov.io/skip")
    }
    # On the object Checkov reports, not the pod template (which Checkov does not read skips from).
    assert "annotations" not in template["metadata"]
    # Each check a host daemon fails deliberately has an annotation of its own (issue 43: NET_RAW and
    # the high UID were failing unexplained).
    assert {"CKV_K8S_16", "CKV_K8S_17", "CKV_K8S_19", "CKV_K8S_28", "CKV_K8S_40"} <= set(waived) and all(
        len(w) > 20 for w in waived.values()
    )
    # Every image is by digest, so nothing waives CKV_K8S_43 (images by digest).
    assert "CKV_K8S_43" not in waived
    assert all("@sha256:" in c["image"] for c in pod.get("initContainers", []) + pod["containers"])


def test_checkov_reads_the_daemonsets_waivers_as_skipped(
    checkov: Path, tmp_path: Path, offline: Callable[..., OfflineRun]
) -> None:
    """Checkov's Kubernetes scan of the plan's installer and injector DaemonSets: every waived check
    is SKIPPED for that DaemonSet, none FAILED."""
    waived: dict[str, set[str]] = {}
    for itype in ("a3-megagpu-8g", "a3-ultragpu-8g"):
        run = offline(gcp_obj(itype))
        docs = [r.inputs for r in run.of_type(DS)]
        assert docs
        for d in docs:
            waived[d["metadata"]["name"]] = {
                v.split("=", 1)[0] for k, v in d["metadata"]["annotations"].items() if k.startswith("checkov.io/skip")
            }
        (tmp_path / f"{itype}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert set(waived) == {"nccl-tcpxo-installer", "device-injector", "nccl-rdma-installer"}
    proc = subprocess.run(
        [str(checkov), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    results = (out[0] if isinstance(out, list) else out)["results"]
    assert not results["parsing_errors"]

    def by_ds(checks: list[dict[str, Any]]) -> dict[str, set[str]]:
        got: dict[str, set[str]] = {}
        for c in checks:
            kind, _, rest = c["resource"].partition(".")
            if kind == "DaemonSet":
                got.setdefault(rest.split(".")[-1], set()).add(c["check_id"])
        return got

    skipped, failed = by_ds(results["skipped_checks"]), by_ds(results["failed_checks"])
    for ds, ids in waived.items():
        assert ids <= skipped.get(ds, set()), (ds, sorted(ids - skipped.get(ds, set())))
        assert not ids & failed.get(ds, set()), (ds, sorted(ids & failed.get(ds, set())))


# Installers whose digest no public source gives (catalog digest: null, read 2026-12-01), each
# waived for CKV_K8S_43 on its DaemonSet; every other image in a GKE plan is pinned by digest.
UNPINNED = {"us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1"}


def _images(run: OfflineRun) -> set[str]:
    found: set[str] = set()
    for r in run.by_urn().values():
        pod = r.inputs.get("spec", {}).get("template", {}).get("spec", {}) if r.type.startswith("kubernetes:") else {}
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            found.add(c["image"])
    return found


@pytest.mark.parametrize("itype", ["a3-megagpu-8g", "a3-ultragpu-8g"])
def test_every_image_in_a_gke_plan_is_pinned_by_digest(itype: str, offline: Callable[..., OfflineRun]) -> None:
    images = _images(offline(gcp_obj(itype)))
    assert images
    tag_only = {i for i in images if "@sha256:" not in i}
    assert tag_only <= UNPINNED, sorted(tag_only - UNPINNED)
    for image in tag_only:
        ds = next(
            r.inputs
            for r in offline(gcp_obj(itype)).of_type(DS)
            if image in {c["image"] for c in r.inputs["spec"]["template"]["spec"].get("initContainers", [])}
        )
        assert any(v.startswith("CKV_K8S_43=") for v in ds["metadata"]["annotations"].values()), image


def test_the_bundled_a3_mega_plan_has_no_tag_only_image() -> None:
    from gpu_cluster.components.plan import plan_stack

    _, run = plan_stack("gcp-h100-gke")
    images = _images(run)
    assert images and all("@sha256:" in i for i in images), sorted(images)


def test_the_installer_image_is_required_by_digest_where_no_reference_gives_one() -> None:
    """gIB v1.1.1 has no published digest: `pulumi up` refuses the stack without the user's one,
    naming the field, the reference's tag and the digest form; a tag alone is refused too."""
    obj = gcp_obj("a3-ultragpu-8g")
    ref = f"{installer_fact('rdma').image}:{installer_fact('rdma').tag}"
    del obj["orchestration"]["installer_image"]
    with pytest.raises(SpecError) as missing:
        parse_spec(obj)
    [(path, why)] = missing.value.problems
    assert path == "orchestration.installer_image"
    assert "required for a3-ultragpu-8g" in why and f"{ref}@sha256:<64 hex digits>" in why
    for bad in (ref, f"{ref}@sha256:abc", f"{ref}@sha256:{'A' * 64}", 7):
        obj["orchestration"]["installer_image"] = bad
        with pytest.raises(SpecError) as refused:
            parse_spec(obj)
        [(path, why)] = refused.value.problems
        assert path == "orchestration.installer_image" and repr(bad)[:40] in why and "@sha256:<64 hex" in why
    obj["orchestration"]["installer_image"] = f"{ref}@{TEST_DIGEST}"
    assert parse_spec(obj).orchestration.installer_image == f"{ref}@{TEST_DIGEST}"
    # Where the catalog pins the installer by a published digest (TCPXO), none is asked for.
    assert gcp_obj("a3-megagpu-8g")["orchestration"].get("installer_image") is None
    parse_spec(gcp_obj("a3-megagpu-8g"))
    # Only gke runs the installer DaemonSet.
    slurm = gcp_obj("a3-ultragpu-8g", kind="slurm")
    slurm["orchestration"]["installer_image"] = f"{ref}@{TEST_DIGEST}"
    with pytest.raises(SpecError) as slurm_err:
        parse_spec(slurm)
    assert any(p == "orchestration.installer_image" and "only applies to gke" in w for p, w in slurm_err.value.problems)


def test_the_offline_plan_without_the_digest_plans_no_installer_and_says_why(
    offline: Callable[..., OfflineRun],
) -> None:
    from gpu_cluster.components.plan import summarize

    obj = gcp_obj("a3-ultragpu-8g")
    del obj["orchestration"]["installer_image"]
    run = offline(obj)
    assert not run.of_type(DS)  # never by tag
    spec = parse_spec(obj, deployer_placeholder=True)
    [caveat] = [c for c in summarize("t", spec, run).caveats if c["topic"] == "installer"]
    assert "orchestration.installer_image" in caveat["text"] and "`pulumi up` refuses" in caveat["text"]
    # With it, the DaemonSet runs exactly the image the stack names.
    supplied = supplied_installer("a3-ultragpu-8g")
    [inst] = _pod(offline(gcp_obj("a3-ultragpu-8g")), "nccl-rdma-installer")["initContainers"]
    assert inst["image"] == supplied
