"""Checkov's Kubernetes checks over what the launcher renders for every bundled Kubernetes stack.

The JobSet, its ConfigMap, and each replicated job's pod template as the ``batch/v1`` Job the
JobSet controller creates from it (Checkov knows Jobs, not the JobSet CRD, so without that the pod
would go unchecked) are written to a directory and scanned in one run of the pinned Checkov from
its own virtualenv (scripts/checkov-venv.sh; `make test` creates it). Every failed check must be
listed, by ID, resource kind and reason, in policies/checkov-k8s-exceptions.yaml, and every entry
there must still match a failure, so the file says exactly what is deliberate.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.checkov_venv import checkov_exe
from tests.launch.test_render_stacks import K8S_STACKS, args, outputs
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands

ROOT = Path(__file__).resolve().parents[2]
EXCEPTIONS = ROOT / "policies" / "checkov-k8s-exceptions.yaml"
RUN_ID = "20261201t070000z-ab12"
# The digest submit resolves for a catalog image published by tag only (a stand-in value; the scan
# judges the pod around it, and that it is pinned by digest).
BUILT_DIGEST = "sha256:" + "0" * 64


@pytest.fixture(scope="module")
def checkov() -> Path:
    return checkov_exe()


def image_for(stack: str) -> str:
    """What submit renders: the fabric's default image, pinned to the digest its registry answers
    (a stand-in digest here) where it is named by tag (workloads/validate/commands.py pin_image)."""
    image = vjob.default_image(outputs(stack).fabric.type)
    return image if vjob.pinned(image) else f"{image}@{BUILT_DIGEST}"


def rendered(stack: str) -> list[dict[str, Any]]:
    r = commands.render_run(outputs(stack), args(image=image_for(stack)), RUN_ID)
    assert r.jobset is not None and r.configmap is not None
    assert r.networkpolicy is not None
    docs: list[dict[str, Any]] = [r.jobset, r.configmap]
    meta = r.jobset["metadata"]
    for rj in r.jobset["spec"]["replicatedJobs"]:
        docs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{meta['name']}-{rj['name']}",
                    "namespace": meta["namespace"],
                    "labels": dict(rj["template"].get("metadata", {}).get("labels", {})),
                },
                "spec": rj["template"]["spec"],
            }
        )
    # The job's NetworkPolicy, created with it (CKV2_K8S_6 looks for one selecting the pods).
    return [*docs, r.networkpolicy]


def load_exceptions() -> list[dict[str, Any]]:
    doc = yaml.safe_load(EXCEPTIONS.read_text()) or {}
    entries = doc.get("exceptions") or []
    for i, e in enumerate(entries):
        for key in ("id", "kind", "reason"):
            assert isinstance(e.get(key), str) and e[key].strip(), f"{EXCEPTIONS.name} exceptions[{i}].{key}: missing"
        if e["kind"] == "Job":
            names = e.get("containers")
            assert isinstance(names, list) and names and all(isinstance(n, str) for n in names), (
                f"{EXCEPTIONS.name} exceptions[{i}].containers: a Job's entry names the containers it covers"
            )
    return list(entries)


def listed_keys(entries: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(check id, kind, container) of every entry; container "" for a kind that has none."""
    return {(e["id"], e["kind"], c) for e in entries for c in (e.get("containers") or [""])}


def failed_keys(report: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """(check id, kind, container) of every failure -> where it failed (check name, file, resource)."""
    out = {}
    for c in report["results"]["failed_checks"]:
        kind = c["resource"].split(".", 1)[0]
        container = container_of(c["resource"]) if kind == "Job" else ""
        out[(c["check_id"], kind, container)] = f"({c['check_name']}) in {c['file_path']}: {c['resource']}"
    return out


# A per-container Job's name: the Job's own, this separator, the container's name.
CONTAINER_SEP = "--"


def per_container(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each Job split into one Job per container (init containers included, each alone in its pod
    spec), named ``<job>--<container>``: Checkov reports a Job, not the container that failed, so
    this is how a failure is matched to its container and a new container's failure is not absorbed
    by an entry written for another. The pod-level fields stay on every part."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc["kind"] != "Job":
            out.append(doc)
            continue
        pod = doc["spec"]["template"]["spec"]
        rest = {k: v for k, v in pod.items() if k not in ("initContainers", "containers")}
        parts = [("initContainers", c) for c in pod.get("initContainers", [])]
        parts += [("containers", c) for c in pod["containers"]]
        for field, c in parts:
            spec = {**rest, "containers": [], field: [c]}
            meta = {**doc["metadata"], "name": f"{doc['metadata']['name']}{CONTAINER_SEP}{c['name']}"}
            out.append({**doc, "metadata": meta, "spec": {**doc["spec"], "template": {"spec": spec}}})
    return out


def container_of(resource: str) -> str:
    """The container a per-container Job's Checkov resource (Job.<ns>.<job>--<container>) names."""
    return resource.rsplit(CONTAINER_SEP, 1)[1]


def scan(checkov: Path, tmp: Path) -> dict[str, Any]:
    for stack in K8S_STACKS:
        (tmp / f"{stack}.yaml").write_text(yaml.safe_dump_all(per_container(rendered(stack)), sort_keys=False))
    proc = subprocess.run(
        [str(checkov), "-d", str(tmp), "--framework", "kubernetes", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # 1: some check failed
    out = json.loads(proc.stdout)
    return out[0] if isinstance(out, list) else out


def test_rendered_jobs_pass_checkov_but_for_the_listed_exceptions(checkov: Path, tmp_path: Path) -> None:
    report = scan(checkov, tmp_path)
    results = report["results"]
    assert not results["parsing_errors"]
    # The pod templates were checked, not only the wrapper objects: a scan that saw no Job proves nothing.
    jobs_checked = {
        (c["file_path"], c["resource"])
        for c in results["passed_checks"] + results["failed_checks"]
        if c["resource"].startswith("Job.")
    }
    # Every container of every stack's pod, each as a Job of its own.
    expected = {
        (f"/{stack}.yaml", f"Job.{d['metadata']['namespace']}.{d['metadata']['name']}")
        for stack in K8S_STACKS
        for d in per_container(rendered(stack))
        if d["kind"] == "Job"
    }
    assert jobs_checked == expected and len(expected) > len(K8S_STACKS)
    listed = listed_keys(load_exceptions())
    failed = failed_keys(report)
    unlisted = sorted(
        f"{cid} {kind} {container} {where}"
        for (cid, kind, container), where in failed.items()
        if (cid, kind, container) not in listed
    )
    assert not unlisted, "Checkov failures not in " + EXCEPTIONS.name + ":\n" + "\n".join(unlisted)
    stale = sorted(listed - set(failed))
    assert not stale, f"{EXCEPTIONS.name} lists exceptions nothing fails any more: {stale}"


def test_a_failure_of_a_container_no_entry_names_is_reported(checkov: Path, tmp_path: Path) -> None:
    """A new container that adds NET_RAW fails CKV_K8S_28 as a container the entry was not written
    for: matched by container, the listing does not absorb it (it did when matched by kind alone)."""
    docs = rendered("gcp-b200-gke")
    pod = docs[2]["spec"]["template"]["spec"]
    extra = {**pod["containers"][0], "name": "newcomer", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}}
    pod["containers"] = [*pod["containers"], extra]
    (tmp_path / "one.yaml").write_text(yaml.safe_dump_all(per_container(docs), sort_keys=False))
    proc = subprocess.run(
        [str(checkov), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    failed = failed_keys(out[0] if isinstance(out, list) else out)
    assert ("CKV_K8S_28", "Job", "newcomer") in failed
    listed = listed_keys(load_exceptions())
    assert ("CKV_K8S_28", "Job", "newcomer") not in listed
    assert any(cid == "CKV_K8S_28" and kind == "Job" for cid, kind, _ in listed)  # by kind alone, it would pass


def test_the_efa_image_scanned_is_pinned_by_digest() -> None:
    aws = [s for s in K8S_STACKS if outputs(s).fabric.type == "efa"]
    assert aws
    for stack in aws:
        job = rendered(stack)[2]
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert c["image"].endswith("@" + BUILT_DIGEST)


# Pod Security Standards, Baseline (kubernetes.io/docs/concepts/security/pod-security-standards,
# v1.35): capabilities that may be added, and the controls the job's pods could touch.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def beyond_baseline(pod: dict[str, Any]) -> list[str]:
    out = [f"hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    out += [f"host namespace {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        sc = c.get("securityContext", {})
        out += [f"{c['name']} privileged"] * bool(sc.get("privileged"))
        out += [
            f"{c['name']} adds {cap}"
            for cap in sc.get("capabilities", {}).get("add", [])
            if cap not in BASELINE_CAPABILITIES
        ]
    return out


def test_the_jobs_namespace_admits_the_pods_at_the_least_level_they_need() -> None:
    """Every bundled Kubernetes stack's job pod goes beyond Baseline (hostPath, NET_ADMIN, IPC_LOCK),
    so the namespace enforces `privileged` and audits `baseline`; none is `privileged: true`. When a
    stack's pods fit Baseline, this fails: lower the level (components/k8s/addons.py)."""
    from gpu_cluster.components.k8s.addons import JOB_POD_SECURITY

    assert JOB_POD_SECURITY["pod-security.kubernetes.io/enforce"] == "privileged"
    assert JOB_POD_SECURITY["pod-security.kubernetes.io/audit"] == "baseline"
    for stack in K8S_STACKS:
        job = rendered(stack)[2]
        assert job["metadata"]["namespace"] == outputs(stack).scheduler.namespace != "default"
        pod = job["spec"]["template"]["spec"]
        found = beyond_baseline(pod)
        assert found, f"{stack}: the job pod fits Baseline; enforce baseline in its namespace"
        assert not [f for f in found if f.endswith("privileged") or f.startswith("host namespace")], (stack, found)
