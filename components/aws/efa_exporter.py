"""EFA throughput on EKS: PCS's EFA counter writer (components/aws/efa_textfile.py) beside a node
exporter that serves its file, one pod on every GPU node, scraped by the stack's AMP collector
(components/aws/metrics.py) into the same workspace as the DCGM exporter.

Why a DaemonSet of our own and not a chart: the EKS stack ran no node exporter, and the community
chart (prometheus-community/helm-charts ``charts/prometheus-node-exporter`` 4.56.1, appVersion 1.12.1,
at cf408a2) defaults to the host's network, PID namespace and root file system (values.yaml lines 382,
390, 396) for the host metrics it exists for. The EFA series need none of that: a reader of
``/sys/class/infiniband`` and the node exporter's textfile collector alone. Its values were read for
the image, the port and the hardening taken here (each cited where it is used).

The pod:

* ``efa-textfile``: a loop that runs PCS's writer (the same script text, from a ConfigMap) every
  :data:`INTERVAL_SECONDS` into an emptyDir, reading the host's ``/sys`` mounted read-only at
  :data:`SYSFS_MOUNT`. Its image is the node exporter's: built ``FROM quay.io/prometheus/busybox``
  (prometheus/node_exporter Dockerfile at v1.12.1, 6044da7), whose ``sh``, ``cat``, ``mv``, ``rm``
  and ``sleep`` are all the writer calls, so one image is pulled, not two.
* ``node-exporter``: every default collector off and only the textfile one on, over the emptyDir
  (README.md line 85 ``--collector.disable-defaults --collector.<name>``, line 164 ``textfile``, the
  ``--collector.textfile.directory`` flag; line 22: it listens on 9100 by default), port named
  ``metrics`` as the chart names it (values.yaml lines 131-139).
* Both run as 65534, non-root, read-only root, no privilege escalation, every capability dropped,
  the runtime's seccomp profile (the chart's securityContext, values.yaml lines 358-367; the image's
  ``USER nobody``), with the chart's commented resource figures (values.yaml lines 339-344).
  No API token: neither calls the Kubernetes API. Reading EFA's counters needs no root: the RDMA core
  makes each ``hw_counters`` file of a port mode 0444 (``drivers/infiniband/core/sysfs.c``
  ``setup_hw_port_stats``, ``attr->attr.attr.mode = 0444``, as quoted in a linux-rdma patch review
  read through find_string 2026-12-07; the kernel tree itself was not read at a commit).
* On every GPU node (the instance-type label, as the DCGM exporter), tolerating the registration
  taint (components/k8s/registration.py): a node waiting for its validation is measured too.

The image comes from quay.io by tag, or by the stack's digest pin (``gpu-cluster pin``,
components/k8s/image_uses.py). The stack's ECR pull-through cache (components/aws/image_cache.py)
has an ECR Public rule only, for the job's image; quay.io is an upstream a rule could serve without
credentials (ECR user guide pull-through-cache.html: "Amazon ECR Public, Kubernetes container image
registry, and Quay (doesn't require authentication)", read 2026-12-07), but no rule for it is made.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s

from gpu_cluster.components.aws import efa_textfile
from gpu_cluster.components.aws.slurm_metrics import NODE_EXPORTER_IMAGE
from gpu_cluster.components.image_pins import pinned
from gpu_cluster.components.k8s.metrics import INSTANCE_TYPE_LABEL
from gpu_cluster.components.k8s.registration import toleration

NAME = "gpu-cluster-efa-exporter"
NAMESPACE = "kube-system"
IMAGE = NODE_EXPORTER_IMAGE
# The node exporter's default port (README.md line 22) and the chart's port name (values.yaml 139).
PORT = 9100
PORT_NAME = "metrics"
TEXTFILE_MOUNT = "/textfile"
SYSFS_MOUNT = "/host/sys"
SCRIPT_MOUNT = "/efa"
SCRIPT_KEY = "gpu-cluster-efa-textfile"
# Half the AMP collector's 30 s scrape (components/aws/metrics.py SCRAPE_INTERVAL), as PCS's timer
# (efa_textfile.INTERVAL): every scrape sees a fresh file. Whole seconds: busybox sleep's plain form.
INTERVAL_SECONDS = 15
# The image's ``USER nobody`` (Dockerfile at v1.12.1), and the chart's runAsUser/runAsGroup 65534.
USER = 65534
# The chart's commented resource example (values.yaml lines 339-344), for each container.
RESOURCES = {"requests": {"cpu": "100m", "memory": "30Mi"}, "limits": {"cpu": "200m", "memory": "50Mi"}}
LABELS = {"app.kubernetes.io/name": NAME}
# Why the image may be by tag: no digest of it was read from its registry for this repository (this
# machine reaches no registry), and one copied from an unrelated repository would be unchecked. The
# stack pins it as it pins the charts' images: ``gpu-cluster pin`` writes the digest into the stack's
# ``images:``, the plan's images caveat lists it until then, and a pinned image drops the annotation.
UNPINNED_REASON = (
    "by tag until gpu-cluster pin records its digest in the stack's images (the plan's images caveat "
    "lists it), as the charts' images are"
)


def exporter_args() -> list[str]:
    """The node exporter's flags: the textfile collector alone, over the shared directory."""
    return ["--collector.disable-defaults", "--collector.textfile", f"--collector.textfile.directory={TEXTFILE_MOUNT}"]


def writer_command() -> list[str]:
    """The writer's loop, ``sh -c LOOP NAME SYSFS DIRECTORY``: the paths are its arguments, so a test
    runs this very command over a fake tree. A failed round is logged and the loop goes on."""
    loop = (
        f'while :; do /bin/sh {SCRIPT_MOUNT}/{SCRIPT_KEY} "$1" "$2" || echo "EFA counters not written" >&2; '
        f"sleep {INTERVAL_SECONDS}; done"
    )
    return ["/bin/sh", "-c", loop, "efa-textfile", SYSFS_MOUNT, TEXTFILE_MOUNT]


def _toleration() -> k8s.core.v1.TolerationArgs:
    t = toleration()
    return k8s.core.v1.TolerationArgs(key=t["key"], operator=t["operator"], effect=t["effect"])


def _box() -> k8s.core.v1.SecurityContextArgs:
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        run_as_non_root=True,
        run_as_user=USER,
        run_as_group=USER,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
    )


def efa_exporter(
    name: str, *, instance_type: str, pins: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.apps.v1.DaemonSet:
    """The writer's ConfigMap and the DaemonSet on every GPU node (module docstring)."""
    script = k8s.core.v1.ConfigMap(
        f"{name}-efa-textfile-script",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{NAME}-script", namespace=NAMESPACE, labels=LABELS),
        data={SCRIPT_KEY: efa_textfile.script()},
        opts=opts,
    )
    image = pinned(IMAGE, pins)
    resources = k8s.core.v1.ResourceRequirementsArgs(requests=RESOURCES["requests"], limits=RESOURCES["limits"])
    # Checkov's own skip annotation (policies/workloads.py k8s-images-by-digest), only while the stack
    # has no pin for the image.
    skip = {} if "@" in image else {"checkov.io/skip1": f"CKV_K8S_43={UNPINNED_REASON}"}
    return k8s.apps.v1.DaemonSet(
        f"{name}-efa-exporter",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=NAME, namespace=NAMESPACE, labels=LABELS, annotations=skip),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=LABELS),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=LABELS),
                spec=k8s.core.v1.PodSpecArgs(
                    node_selector={INSTANCE_TYPE_LABEL: instance_type},
                    tolerations=[_toleration()],
                    automount_service_account_token=False,
                    security_context=k8s.core.v1.PodSecurityContextArgs(
                        run_as_non_root=True,
                        run_as_user=USER,
                        run_as_group=USER,
                        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
                    ),
                    containers=[
                        k8s.core.v1.ContainerArgs(
                            name="node-exporter",
                            image=image,
                            image_pull_policy="IfNotPresent",
                            args=exporter_args(),
                            ports=[k8s.core.v1.ContainerPortArgs(name=PORT_NAME, container_port=PORT)],
                            security_context=_box(),
                            resources=resources,
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="textfile", mount_path=TEXTFILE_MOUNT, read_only=True)
                            ],
                        ),
                        k8s.core.v1.ContainerArgs(
                            name="efa-textfile",
                            image=image,
                            image_pull_policy="IfNotPresent",
                            command=writer_command(),
                            security_context=_box(),
                            resources=resources,
                            volume_mounts=[
                                k8s.core.v1.VolumeMountArgs(name="textfile", mount_path=TEXTFILE_MOUNT),
                                k8s.core.v1.VolumeMountArgs(name="sys", mount_path=SYSFS_MOUNT, read_only=True),
                                k8s.core.v1.VolumeMountArgs(name="script", mount_path=SCRIPT_MOUNT, read_only=True),
                            ],
                        ),
                    ],
                    volumes=[
                        k8s.core.v1.VolumeArgs(name="textfile", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
                        k8s.core.v1.VolumeArgs(
                            name="sys", host_path=k8s.core.v1.HostPathVolumeSourceArgs(path="/sys", type="Directory")
                        ),
                        k8s.core.v1.VolumeArgs(
                            name="script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=f"{NAME}-script")
                        ),
                    ],
                ),
            ),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[script])),
    )


def scrape_job() -> dict[str, object]:
    """The AMP collector's job for these pods: each series labelled with its node, as the DCGM job."""
    return {
        "job_name": "gpu-cluster-efa",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [NAMESPACE]}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "action": "keep", "regex": NAME},
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "action": "keep", "regex": PORT_NAME},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }
