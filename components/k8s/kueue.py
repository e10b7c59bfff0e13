"""Kueue with a ProvisioningRequest admission check: how a multi-node flex-start job on GKE gets
all its nodes at once (queued provisioning) instead of one by one while its rendezvous waits.

GKE's guide (cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest, "Run a
large-scale workload with flex-start with queued provisioning", read 2026-12-01): "With flex-start
with queued provisioning, GKE allocates all requested resources at the same time"; the node pool
takes ``--flex-start`` and ``--enable-queued-provisioning``; Kueue "automates the lifecycle of
flex-start with queued provisioning requests". Kueue's side (kubernetes-sigs/kueue
site/content/en/docs/concepts/admission_check/provisioning_request.md at v0.17.8, 818686e): an
AdmissionCheck with ``controllerName: kueue.x-k8s.io/provisioning-request`` whose parameters name
a ProvisioningRequestConfig, referenced from the ClusterQueue; the workload is admitted only once
the ProvisioningRequest is ``Provisioned=true``.

The objects follow cluster-toolkit's A3 Ultra flex-start example at 1047080
(examples/gke-consumption-options/dws-flex-start-queued-provisioning/dws-queues.yaml.tftpl: one
ResourceFlavor, AdmissionCheck ``dws-prov``, ProvisioningRequestConfig with
``provisioningClassName: queued-provisioning.gke.io`` and ``managedResources: [nvidia.com/gpu]``,
a ClusterQueue with the GPU quota and the check, a LocalQueue in the jobs' namespace), and a job
joins the queue by the label ``kueue.x-k8s.io/queue-name`` on the JobSet (nccl-jobset-example.yaml
there). Our ClusterQueue covers cpu and memory too, at what the pool's nodes hold (the catalog), so
a pod that requests them is admissible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.image_pins import chart_image

# The chart Kueue publishes with each release (charts/kueue/README.md at v0.17.8: `helm install
# kueue oci://registry.k8s.io/kueue/charts/kueue --version="0.17.8" --create-namespace
# --namespace=kueue-system`). 0.17.8 is the latest patch of the 0.17 line (tag v0.17.8, 818686e,
# 2026-07-22; charts/kueue/Chart.yaml version 0.17.8, appVersion v0.17.8; the repository's tags after
# it are v0.18.x). cluster-toolkit qualifies the line's first release (modules/management/kubectl-apply
# variables.tf at 1047080: kueue_supported_versions "0.17.1", ... "0.15.0"); between 0.17.1 and 0.17.8
# the v1beta2 spec types of every object here are unchanged (apis/kueue/v1beta2, read at both tags:
# components/liveness/apis.py), and the chart's only new value is enableVisibilityAuthReaderRoleBinding
# (default true), so the objects and values below stand as they were.
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_VERSION = "0.17.8"
KUEUE_NAMESPACE = "kueue-system"
# The controller image of the published chart: registry.k8s.io/kueue/kueue at v<chart version>
# (the release packaging rewrites the git values' staging image, us-central1-docker.pkg.dev/
# k8s-staging-images/kueue/kueue:release-0.17, to registry.k8s.io/kueue/kueue:<tag> with pullPolicy
# IfNotPresent for a vX.Y.Z tag: hack/helm-chart-package.sh lines 32-40 and 70 at v0.17.8;
# kubernetes/k8s.io registry.k8s.io/images/k8s-staging-kueue/images.yaml promotes `kueue` by those
# tags; NVIDIA/aicr docs/user/container-images.md at 005da13 lists registry.k8s.io/kueue/kueue:v0.19.3
# for chart 0.19.3). The promoter manifests stored here stop at v0.16.0, and no other public source
# read gives v0.17.8's digest, so it is pulled by tag unless the stack pins it (components/
# image_pins.py). The chart writes "{{ .Values.controllerManager.manager.image.repository }}:{{
# .Values.controllerManager.manager.image.tag | default .Chart.AppVersion }}" (charts/kueue/templates/
# manager/manager.yaml line 50 at v0.17.8), so a pin goes in as repository and tag@digest; its values.yaml
# asks for pullPolicy IfNotPresent on a released version.
KUEUE_IMAGE = f"registry.k8s.io/kueue/kueue:v{KUEUE_VERSION}"
API_VERSION = "kueue.x-k8s.io/v1beta2"
# Kueue's ProvisioningRequest admission check controller, and GKE's provisioning class for
# queued provisioning (cluster-toolkit dws-queues.yaml.tftpl at 1047080).
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
PROVISIONING_CLASS = "queued-provisioning.gke.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A job's annotations under provreq.kueue.x-k8s.io/ are "directly passed to created
# ProvisioningRequest" as its parameters (site/content/en/docs/concepts/admission_check/
# provisioning_request.md line 162 at v0.17.8); maxRunDurationSeconds is how long GKE keeps the
# request's nodes (site/static/examples/provisioning/sample-job.yaml line 9 there; cluster-toolkit's
# queued nccl-jobset-example.yaml line 23 at 1047080).
MAX_RUN_ANNOTATION = "provreq.kueue.x-k8s.io/maxRunDurationSeconds"
RETRY_STRATEGY = {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
FLAVOR, CHECK, CONFIG, CLUSTER_QUEUE, LOCAL_QUEUE = (
    "gpu-flavor",
    "gpu-provisioning",
    "gpu-provisioning",
    "gpu-cluster-queue",
    "gpu-jobs",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """What the GPU pool holds at its largest: the ClusterQueue admits no more than that."""

    gpus: int
    cpus: int
    memory_gib: int


def _meta(name: str, labels: Mapping[str, str], namespace: str | None = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(labels))


def queue_objects(quota: Quota, job_namespace: str) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(kind, name, namespace, spec) of each Kueue object, in the order they depend on each other."""
    resources: list[dict[str, Any]] = [
        {"name": "cpu", "nominalQuota": quota.cpus},
        {"name": "memory", "nominalQuota": f"{quota.memory_gib}Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": quota.gpus},
    ]
    return [
        ("ResourceFlavor", FLAVOR, None, {}),
        (
            "ProvisioningRequestConfig",
            CONFIG,
            None,
            {
                "provisioningClassName": PROVISIONING_CLASS,
                "managedResources": ["nvidia.com/gpu"],
                # Kueue's defaults, written out so the plan shows how often a request GKE could not
                # fill is tried again before Kueue deactivates the Workload (what `validate submit`
                # waits for on a queued pool: workloads/validate/kube_queue.py). kueue v0.17.8
                # apis/kueue/v1beta2/provisioningrequestconfig_types.go lines 127-157: "Defaults to
                # 3", "Defaults to 60", "Defaults to 1800".
                "retryStrategy": RETRY_STRATEGY,
            },
        ),
        (
            "AdmissionCheck",
            CHECK,
            None,
            {
                "controllerName": PROVISIONING_CONTROLLER,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": CONFIG},
            },
        ),
        (
            "ClusterQueue",
            CLUSTER_QUEUE,
            None,
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": job_namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": [r["name"] for r in resources],
                        "flavors": [{"name": FLAVOR, "resources": resources}],
                    }
                ],
                # v1beta2 names the checks under admissionChecksStrategy (apis/kueue/v1beta2/
                # clusterqueue_types.go at v0.17.8, lines 120 and 148-170; kueue PR 7490 dropped
                # v1beta1's spec.admissionChecks, which the v1beta2 schema prunes, so no
                # ProvisioningRequest would ever be made); no onFlavors: the check runs for every
                # workload of the queue (site/static/examples/provisioning/provisioning-setup.yaml).
                "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
            },
        ),
        ("LocalQueue", LOCAL_QUEUE, job_namespace, {"clusterQueue": CLUSTER_QUEUE}),
    ]


def kueue(
    name: str,
    *,
    quota: Quota,
    job_namespace: str,
    node_selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
    namespace_ready: pulumi.Resource,
    pins: Mapping[str, str] | None = None,
) -> list[pulumi.Resource]:
    """The Kueue controller (on the nodes ``node_selector`` picks: the CPU system pool, so it never
    waits for GPU nodes) and the queue a job is submitted through. ``namespace_ready``: the jobs'
    namespace, which the LocalQueue lives in."""
    # helm.v4.Chart never creates its namespace (unlike `helm install --create-namespace`).
    ns = k8s.core.v1.Namespace(f"{name}-ns", metadata=_meta(KUEUE_NAMESPACE, labels), opts=opts)
    chart = k8s.helm.v4.Chart(
        name,
        chart=KUEUE_CHART,
        version=KUEUE_VERSION,
        namespace=KUEUE_NAMESPACE,
        # charts/kueue/values.yaml at v0.17.8 (line 94): controllerManager.nodeSelector.
        values=kueue_values(node_selector, pins),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ns])),
    )
    made: list[pulumi.Resource] = [ns, chart]
    # The chart brings the CRDs and the webhooks that check these objects: each waits for it.
    after: list[pulumi.Resource] = [chart, namespace_ready]
    for kind, obj_name, obj_ns, spec in queue_objects(quota, job_namespace):
        res = k8s.apiextensions.CustomResource(
            f"{name}-{kind.lower()}",
            api_version=API_VERSION,
            kind=kind,
            metadata=_meta(obj_name, labels, obj_ns),
            spec=spec,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(after))),
        )
        made.append(res)
        after = [chart, namespace_ready, res]
    return made


def kueue_values(node_selector: Mapping[str, str], pins: Mapping[str, str] | None) -> dict[str, Any]:
    """The chart values we set: the controller's node pool, and its image where the stack pins
    :data:`KUEUE_IMAGE`."""
    manager: dict[str, Any] = {"nodeSelector": dict(node_selector)}
    image = chart_image(KUEUE_IMAGE, pins or {})
    if image:
        manager["manager"] = {"image": {**image, "pullPolicy": "IfNotPresent"}}
    return {"controllerManager": manager}
