"""Binary Authorization's policy against the images a GKE cluster pulls (components/gcp/binauthz.py),
on the rules of the API's own Policy message (googleapis google/cloud/binaryauthorization/v1/
resources.proto at 3597f7d)."""

from __future__ import annotations

import pytest

from gpu_cluster.components.gcp import binauthz as ba
from gpu_cluster.components.k8s.image_uses import gke_pulled_images
from gpu_cluster.components.spec import parse_spec, read_stack_file

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("pattern", "ref", "matches"),
    [
        ("nvcr.io/nvidia/pytorch", f"nvcr.io/nvidia/pytorch:25.12-py3@{D}", True),
        ("nvcr.io/nvidia/*", "nvcr.io/nvidia/pytorch:25.12-py3", True),
        # a trailing * stays in its path segment; ** "matches subdirectories of a given entry"
        ("us-docker.pkg.dev/gce-ai-infra/*", "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/x:v1", False),
        ("us-docker.pkg.dev/gce-ai-infra/**", "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/x:v1", True),
        ("registry.k8s.io/jobset/jobset", "registry.k8s.io/kueue/kueue:v0.17.8", False),
    ],
)
def test_allowlist_patterns(pattern: str, ref: str, matches: bool) -> None:
    assert ba.pattern_matches(pattern, ref) is matches


def test_rules_refuse_attest_or_log() -> None:
    job = ba.Pulled("nvcr.io/nvidia/pytorch:25.12-py3", "job", "gpu-jobs", "sa")
    ctrl = ba.Pulled("registry.k8s.io/jobset/jobset:v0.12.0", "jobset", "jobset-system")
    policy = {
        "defaultAdmissionRule": {"evaluationMode": "ALWAYS_ALLOW", "enforcementMode": "ENFORCED_BLOCK_AND_AUDIT_LOG"},
        "kubernetesNamespaceAdmissionRules": {
            "gpu-jobs": {
                "evaluationMode": "REQUIRE_ATTESTATION",
                "requireAttestationsBy": ["projects/p/attestors/built"],
                "enforcementMode": "ENFORCED_BLOCK_AND_AUDIT_LOG",
            }
        },
        "clusterAdmissionRules": {
            "z.c": {"evaluationMode": "ALWAYS_DENY", "enforcementMode": "DRYRUN_AUDIT_LOG_ONLY"},
        },
    }
    v_job, v_ctrl = ba.evaluate(policy, "z.c", [job, ctrl])
    assert v_job.refused and v_job.attestation and "by projects/p/attestors/built" in v_job.why
    assert not v_ctrl.refused and v_ctrl.dry_run and "clusterAdmissionRules[z.c]" in v_ctrl.why
    # Another cluster's rule does not apply: the default rule decides, and allows.
    assert ba.evaluate(policy, "z.other", [ctrl]) == [
        ba.Verdict(ctrl, False, "every rule that applies is ALWAYS_ALLOW")
    ]


def test_a_tcpxo_cluster_lists_every_image_its_objects_and_job_pull() -> None:
    name, raw = read_stack_file("gcp-h100-gke")
    spec = parse_spec(raw, deployer_placeholder=True)
    by_who = {p.who: p for p in gke_pulled_images(spec)}
    assert set(by_who) == {
        "the NCCL plugin installer",
        "the installer's pause container",
        "the TCPXO pre-installation",
        "the NRI device injector",
        "the JobSet controller of chart 0.12.0",
        "the Kueue controller of chart 0.17.8",
        "the Pushgateway of chart 3.8.0",
        "the validation job's pods",
        "the receive-datapath sidecar",
    }
    assert by_who["the NCCL plugin installer"].namespace == "kube-system"
    assert (by_who["the validation job's pods"].namespace, by_who["the validation job's pods"].service_account) == (
        "gpu-jobs",
        "workload-identity-k8s-sa",
    )


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("ubuntu:26.04@sha256:" + "0" * 64, "docker.io/library/ubuntu"),
        ("rocm/pytorch:tag", "docker.io/rocm/pytorch"),
        ("nvcr.io/nvidia/pytorch:25.12-py3", "nvcr.io/nvidia/pytorch"),
        ("localhost:5000/a/b:1", "localhost:5000/a/b"),
    ],
)
def test_the_allowlist_hint_is_in_the_apis_registry_path_form(ref: str, want: str) -> None:
    assert ba.allowlist_name(ref) == want
