"""Binary Authorization: which of the images a GKE cluster pulls would the project's policy refuse?

The cluster enforces the project's singleton policy (components/gcp/orchestration_gke.py,
``PROJECT_SINGLETON_POLICY_ENFORCE``), so a policy tightened by the project's owner can keep the
NCCL installer, a controller or the job's own pods from starting. ``gpu-cluster preflight`` reads
the policy (REST ``GET /v1/projects/{project}/policy``) and hands it here with the list of images
(components/k8s/image_uses.py ``gke_pulled_images``).

The policy's shape and meaning are the API's own (googleapis/googleapis
google/cloud/binaryauthorization/v1/resources.proto at 3597f7d):

* ``admissionWhitelistPatterns[].namePattern``: "A matching admission request will always be
  permitted"; a pattern is ``registry/path/to/image``, with a trailing ``*`` allowed only after the
  ``registry/`` part and a trailing ``**`` that "matches subdirectories of a given entry";
* ``defaultAdmissionRule``, required, "for a cluster without a per-cluster, per-kubernetes-service-
  account, or per-istio-service-identity admission rule"; ``clusterAdmissionRules`` keyed
  ``location.clusterId``, ``kubernetesNamespaceAdmissionRules`` keyed by namespace,
  ``kubernetesServiceAccountAdmissionRules`` keyed ``namespace:serviceaccount``;
* a rule's ``evaluationMode``: ``ALWAYS_ALLOW``, ``REQUIRE_ATTESTATION`` (every image attested by
  each of ``requireAttestationsBy``) or ``ALWAYS_DENY``; its ``enforcementMode``:
  ``ENFORCED_BLOCK_AND_AUDIT_LOG`` blocks, ``DRYRUN_AUDIT_LOG_ONLY`` only logs;
* ``globalPolicyEvaluationMode: ENABLE`` exempts "common system-level images" by a Google-maintained
  policy (unspecified: DISABLE).

How the specific rules rank against each other is not in the proto, so every rule that names the
pod's cluster, namespace or service account is weighed, and the default rule where none does: an
image is reported when any rule that may decide it would refuse it, with that rule named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SOURCE = "googleapis/googleapis@3597f7d google/cloud/binaryauthorization/v1/resources.proto"


@dataclass(frozen=True, slots=True)
class Pulled:
    """One image the cluster pulls, and the pods that pull it."""

    ref: str
    who: str
    namespace: str
    service_account: str = "default"


@dataclass(frozen=True, slots=True)
class Verdict:
    image: Pulled
    refused: bool
    """Blocked at admission (an enforced ALWAYS_DENY, or REQUIRE_ATTESTATION whose attestations
    cannot be seen from here)."""
    why: str
    dry_run: bool = False
    """The rule would refuse it but only logs (DRYRUN_AUDIT_LOG_ONLY)."""
    attestation: bool = False
    """Every enforced rule that would refuse it is REQUIRE_ATTESTATION: admitted if attested, which
    the project's attestations (not read here) decide."""


def image_name(ref: str) -> str:
    """``registry/path/image`` of a reference, without tag or digest."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


# A short name is Docker Hub's: Docker's reference grammar reads ``ubuntu`` as
# ``docker.io/library/ubuntu`` (distribution/reference normalize.go: defaultDomain "docker.io",
# officialRepoPrefix "library/"), and a namePattern has the form ``registry/path/to/image``
# (resources.proto, AdmissionWhitelistPattern).
DOCKER_HUB = "docker.io"


def allowlist_name(ref: str) -> str:
    """The ``namePattern`` that names ``ref``'s image in the form the API takes,
    ``registry/path/to/image``: a Docker Hub short name gets its registry and ``library/``."""
    name = image_name(ref)
    first, slash, _ = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"{DOCKER_HUB}/{name}" if slash else f"{DOCKER_HUB}/library/{name}"


def pattern_matches(pattern: str, ref: str) -> bool:
    """An allowlist ``namePattern`` against an image: exact, ``*`` within the last path segment,
    ``**`` over subdirectories (resources.proto, AdmissionWhitelistPattern)."""
    name = image_name(ref)
    if pattern.endswith("**"):
        return name.startswith(pattern[:-2])
    if pattern.endswith("*"):
        head = pattern[:-1]
        return name.startswith(head) and "/" not in name[len(head) :]
    return image_name(pattern) == name


def _rule_text(where: str, rule: Mapping[str, Any]) -> str:
    mode = rule.get("evaluationMode", "EVALUATION_MODE_UNSPECIFIED")
    extra = f" by {', '.join(rule.get('requireAttestationsBy') or [])}" if mode == "REQUIRE_ATTESTATION" else ""
    return f"{where} ({mode}{extra}, {rule.get('enforcementMode', 'ENFORCEMENT_MODE_UNSPECIFIED')})"


def rules_for(policy: Mapping[str, Any], cluster_key: str, image: Pulled) -> list[tuple[str, Mapping[str, Any]]]:
    """Every rule that may decide ``image``'s pods: the ones naming their cluster, namespace or
    service account, else the default rule."""
    specific = [
        (f"clusterAdmissionRules[{cluster_key}]", (policy.get("clusterAdmissionRules") or {}).get(cluster_key)),
        (
            f"kubernetesNamespaceAdmissionRules[{image.namespace}]",
            (policy.get("kubernetesNamespaceAdmissionRules") or {}).get(image.namespace),
        ),
        (
            f"kubernetesServiceAccountAdmissionRules[{image.namespace}:{image.service_account}]",
            (policy.get("kubernetesServiceAccountAdmissionRules") or {}).get(
                f"{image.namespace}:{image.service_account}"
            ),
        ),
    ]
    found = [(w, r) for w, r in specific if isinstance(r, Mapping)]
    return found or [("defaultAdmissionRule", policy.get("defaultAdmissionRule") or {})]


def evaluate(policy: Mapping[str, Any], cluster_key: str, images: list[Pulled]) -> list[Verdict]:
    patterns = [str(p.get("namePattern", "")) for p in policy.get("admissionWhitelistPatterns") or []]
    out = []
    for img in images:
        allowed_by = next((p for p in patterns if p and pattern_matches(p, img.ref)), None)
        if allowed_by is not None:
            out.append(Verdict(img, False, f"allowlisted by {allowed_by!r}"))
            continue
        refusing = []
        for where, rule in rules_for(policy, cluster_key, img):
            mode = rule.get("evaluationMode")
            if mode == "ALWAYS_ALLOW":
                continue
            refusing.append((where, rule))
        if not refusing:
            out.append(Verdict(img, False, "every rule that applies is ALWAYS_ALLOW"))
            continue
        enforced = [(w, r) for w, r in refusing if r.get("enforcementMode") != "DRYRUN_AUDIT_LOG_ONLY"]
        text = "; ".join(_rule_text(w, r) for w, r in (enforced or refusing))
        attest = bool(enforced) and all(r.get("evaluationMode") == "REQUIRE_ATTESTATION" for _, r in enforced)
        out.append(Verdict(img, bool(enforced), text, dry_run=not enforced, attestation=attest))
    return out
