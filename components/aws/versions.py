"""Every version the AWS stacks pin, in one place, each with where it was read and when.

Pure data (no Pulumi): the spec reads the EKS default and the supported range from here, the
components read the chart, add-on and scheduler pins. The JobSet chart, shared with GKE, is
pinned beside its installer in ``components/k8s/addons.py`` (``JOBSET_VERSION``).

Moving a pin is a deliberate change: re-read the source, update the value and the date, and run
the offline plan (the tests assert what each pin renders).
"""

from __future__ import annotations

from typing import Mapping

# --- EKS control plane ---------------------------------------------------------------------------
# Kubernetes minor versions on EKS and the end of their standard support (after which a cluster
# pays the extended-support price per cluster hour, for 12 more months, and is then upgraded
# automatically). A minor version is in standard support for 14 months after its EKS release.
# Source: EKS user guide "Understand the Kubernetes version lifecycle on EKS"
# (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html) and its release calendar as
# mirrored by endoflife.date/amazon-eks (read 2026-12): 1.35 released 2026-01-28, standard support
# to 2027-03-27; 1.34 to 2026-12-02; 1.33 to 2026-07-29; 1.32 to 2026-03-23; 1.31 to 2025-11-26
# (its extended support ended 2026-11-26).
EKS_STANDARD_SUPPORT_END: Mapping[str, str] = {
    "1.35": "2027-03-27",
    "1.34": "2026-12-02",
    "1.33": "2026-07-29",
    "1.32": "2026-03-23",
}
# Versions EKS no longer offers at all (past extended support, 2026-12): a create is refused.
EKS_UNAVAILABLE = ("1.28", "1.29", "1.30", "1.31")
# The newest minor with a published standard-support date; what every EKS stack runs unless it
# says otherwise. (1.36 and 1.37 node images exist, awslabs/amazon-eks-ami v20261112, but their
# EKS calendar dates were not found to cite; move here once read.)
EKS_KUBERNETES_VERSION = "1.35"

# --- EKS managed add-ons -------------------------------------------------------------------------
# Left unpinned on purpose (addon_version unset): EKS installs the add-on's default version for the
# cluster's Kubernetes version and keeps it compatible with the control plane. Names from the EKS
# user guide: "aws-fsx-csi-driver" (fsx-csi-create), "eks-pod-identity-agent" (pod-id-agent-setup),
# "vpc-cni" (managing-vpc-cni).
FSX_CSI_ADDON = "aws-fsx-csi-driver"
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
VPC_CNI_ADDON = "vpc-cni"

# --- in-cluster charts (EKS) ---------------------------------------------------------------------
# NVIDIA device plugin: chart and app 0.20.0 (NVIDIA/k8s-device-plugin tag v0.20.0, 1b826ac,
# 2026-08-19, deployments/helm/nvidia-device-plugin/Chart.yaml).
NVIDIA_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_PLUGIN_VERSION = "0.20.0"
# The image that chart runs: "{{ .Values.image.repository }}:{{ .Values.image.tag | default $tag }}"
# with $tag "v" + appVersion (templates/_helpers.tpl:83-86, nvidia-device-plugin.fullimage, at
# v0.20.0, 1b826ac), image.repository nvcr.io/nvidia/k8s-device-plugin and image.tag "" (values.yaml
# lines 49-53); the same image is the init and sidecar container where a config map is given
# (templates/daemonset-device-plugin.yml lines 63, 99, 135), and gfd and its NFD subchart are off by
# default (values.yaml line 111; Chart.yaml's condition nfd.enabled,gfd.enabled). No source read
# gives its digest: pulled by tag unless the stack pins it (images:), which goes in as repository and
# tag@digest.
NVIDIA_PLUGIN_IMAGE = f"nvcr.io/nvidia/k8s-device-plugin:v{NVIDIA_PLUGIN_VERSION}"
# EFA device plugin: chart v0.5.30 installs image v0.5.20 (aws/eks-charts 5239609, 2026-08-03,
# stable/aws-efa-k8s-device-plugin/Chart.yaml appVersion "v0.5.20"). The chart version is not the
# image version: chart v0.5.20 installed image v0.5.13.
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"
EFA_PLUGIN_VERSION = "v0.5.30"
EFA_PLUGIN_IMAGE_TAG = "v0.5.20"

# The EFA plugin's image from the cluster's own region. The chart's default repository is the EKS
# registry in us-west-2 (aws/eks-charts stable/aws-efa-k8s-device-plugin/values.yaml, image.repository
# 602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin, read at 050f81e), which
# a node in another partition (China, GovCloud) cannot pull from. "Amazon EKS replicates the images to
# a repository in each Amazon EKS supported AWS Region"; the registry per region is the EKS user
# guide's table (awsdocs/amazon-eks-user-guide latest/ug/workloads/add-ons-images.adoc at 1cc6ebb,
# read 2026-12-01). Left out: ap-east-2, whose row names a host in ap-east-1 (the page contradicts
# itself), and eusc-de-east-1 (not a region the spec accepts). A region not here is refused for EKS
# (components/aws/rules.py), never given a guessed registry.
EKS_REGISTRIES: Mapping[str, str] = {
    "af-south-1": "877085696533.dkr.ecr.af-south-1.amazonaws.com",
    "ap-east-1": "800184023465.dkr.ecr.ap-east-1.amazonaws.com",
    "ap-southeast-3": "296578399912.dkr.ecr.ap-southeast-3.amazonaws.com",
    "ap-south-2": "900889452093.dkr.ecr.ap-south-2.amazonaws.com",
    "ap-southeast-4": "491585149902.dkr.ecr.ap-southeast-4.amazonaws.com",
    "ap-southeast-6": "333609536671.dkr.ecr.ap-southeast-6.amazonaws.com",
    "ap-south-1": "602401143452.dkr.ecr.ap-south-1.amazonaws.com",
    "ap-northeast-3": "602401143452.dkr.ecr.ap-northeast-3.amazonaws.com",
    "ap-northeast-2": "602401143452.dkr.ecr.ap-northeast-2.amazonaws.com",
    "ap-southeast-1": "602401143452.dkr.ecr.ap-southeast-1.amazonaws.com",
    "ap-southeast-2": "602401143452.dkr.ecr.ap-southeast-2.amazonaws.com",
    "ap-southeast-7": "121268973566.dkr.ecr.ap-southeast-7.amazonaws.com",
    "ap-northeast-1": "602401143452.dkr.ecr.ap-northeast-1.amazonaws.com",
    "cn-north-1": "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn",
    "cn-northwest-1": "961992271922.dkr.ecr.cn-northwest-1.amazonaws.com.cn",
    "eu-central-1": "602401143452.dkr.ecr.eu-central-1.amazonaws.com",
    "eu-west-1": "602401143452.dkr.ecr.eu-west-1.amazonaws.com",
    "eu-west-2": "602401143452.dkr.ecr.eu-west-2.amazonaws.com",
    "eu-south-1": "590381155156.dkr.ecr.eu-south-1.amazonaws.com",
    "eu-west-3": "602401143452.dkr.ecr.eu-west-3.amazonaws.com",
    "eu-south-2": "455263428931.dkr.ecr.eu-south-2.amazonaws.com",
    "eu-north-1": "602401143452.dkr.ecr.eu-north-1.amazonaws.com",
    "eu-central-2": "900612956339.dkr.ecr.eu-central-2.amazonaws.com",
    "il-central-1": "066635153087.dkr.ecr.il-central-1.amazonaws.com",
    "mx-central-1": "730335286997.dkr.ecr.mx-central-1.amazonaws.com",
    "me-south-1": "558608220178.dkr.ecr.me-south-1.amazonaws.com",
    "me-central-1": "759879836304.dkr.ecr.me-central-1.amazonaws.com",
    "us-east-1": "602401143452.dkr.ecr.us-east-1.amazonaws.com",
    "us-east-2": "602401143452.dkr.ecr.us-east-2.amazonaws.com",
    "us-west-1": "602401143452.dkr.ecr.us-west-1.amazonaws.com",
    "us-west-2": "602401143452.dkr.ecr.us-west-2.amazonaws.com",
    "ca-central-1": "602401143452.dkr.ecr.ca-central-1.amazonaws.com",
    "ca-west-1": "761377655185.dkr.ecr.ca-west-1.amazonaws.com",
    "sa-east-1": "602401143452.dkr.ecr.sa-east-1.amazonaws.com",
    "us-gov-east-1": "151742754352.dkr.ecr.us-gov-east-1.amazonaws.com",
    "us-gov-west-1": "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com",
}
# The repository path under the registry, as the chart's default names it.
EFA_PLUGIN_REPOSITORY_PATH = "eks/aws-efa-k8s-device-plugin"


def efa_plugin_repository(region: str) -> str:
    """The EFA device plugin's image repository in ``region``'s EKS registry (KeyError: none recorded)."""
    return f"{EKS_REGISTRIES[region]}/{EFA_PLUGIN_REPOSITORY_PATH}"


def efa_plugin_image(region: str) -> str:
    """The EFA plugin's ``repo:tag`` in ``region``: the chart's daemonset writes
    "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
    (aws/eks-charts stable/aws-efa-k8s-device-plugin/templates/daemonset.yaml line 66 at 5239609), its
    only container. No digest is published beside the tag; the registry is private to AWS accounts
    (an EKS node pulls with its role; `gpu-cluster pin` needs `aws ecr get-login-password | docker
    login` to that host)."""
    return f"{efa_plugin_repository(region)}:{EFA_PLUGIN_IMAGE_TAG}"


# The EKS managed add-ons (vpc-cni, eks-pod-identity-agent, aws-fsx-csi-driver) pull the images EKS
# picks for the add-on version it installs (left unset above): their references are not ours to
# pin, and the plan's images caveat names them as such.
MANAGED_ADDONS = (VPC_CNI_ADDON, POD_IDENTITY_ADDON, FSX_CSI_ADDON)


# --- AWS PCS (managed Slurm) ---------------------------------------------------------------------
# Slurm 25.11: the version aws-hpc-recipes' getting-started cluster offers (recipes/pcs/
# getting_started/assets/cluster.yaml, SlurmVersion AllowedValues [25.11], 009a29a, 2026-08-07)
# and the newest in the PCS "AMI release notes" (read 2026-12). PCS updates sample images only for
# the latest scheduler versions; 25.11 and later sample images are Amazon Linux 2023 only.
PCS_SLURM_VERSION = "25.11"
# The PCS sample image for that version: Amazon Linux 2023, EFA installer 1.47.0, GDRCopy 2.5.1,
# NVIDIA driver 590.48.01, CUDA 13.1 (PCS user guide "AMI release notes", x86_64, Slurm 25.11).
# AWS calls sample images a starting point; a production image is built from them or from the
# DLAMI (aws-hpc-recipes recipes/pcs/dlami_for_pcs_imagebuilder, AMIs named
# dlami-for-pcs-base-al2023-x86_64) and pinned with compute.image.
PCS_AMI_OS = "al2023"


def pcs_ami_name(slurm_version: str = PCS_SLURM_VERSION, os_name: str = PCS_AMI_OS) -> str:
    """The sample image name prefix (aws-hpc-recipes cluster.yaml ``construct_ami_prefix``)."""
    return f"aws-pcs-sample_ami-{os_name}-x86_64-slurm-{slurm_version}"
