"""``submit`` on Kubernetes: the validation JobSet created through the cluster's API, followed to
its end and its report fetched; after a hang inside a collective, the pairwise search as one
JobSet per pair and the judge's own (:mod:`gpu_cluster.workloads.validate.kube_pairs`); the failed nodes
tainted, as the judge's ``--drain`` does on Slurm; the nodes it passed admitted to work (the GPU
pools' registration taint removed, components/contract.py UNVALIDATED_TAINT_KEY).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from gpu_cluster.components.contract import UNVALIDATED_TAINT_KEY, ClusterOutputs
from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.validation import ValidationJob
from gpu_cluster.workloads.validate import certificate, kube, kube_pairs
from gpu_cluster.workloads.validate.verdict import Measurement, Verdict


def run(
    api: Any,
    jobset: dict[str, Any],
    networkpolicy: dict[str, Any] | None,
    job: ValidationJob,
    run_id: str,
    outs: ClusterOutputs,
    dest: Path,
    args: argparse.Namespace,
    say: Callable[[str], None],
    timeout: float,
) -> None:
    """Create the JobSet (with its code ConfigMap and NetworkPolicy), follow it, fetch its report
    and logs into ``dest``; after a hang, the per-pair JobSets and the judge's; then admit the nodes
    it passed, taint the failed nodes (unless ``--no-drain``) and delete what was made (``--delete``)."""
    ns, name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
    kube.create(api, jobset, code_bundle.build(), networkpolicy)
    say(f"created jobset {name}, its code ConfigMap and its NetworkPolicy in namespace {ns}")
    made = [name]
    try:
        final = kube.follow(api, ns, name, expected_nodes=outs.nodes, poll_s=args.poll, timeout_s=timeout, say=say)
        got = kube.fetch(api, ns, name, dest)
        say(f"jobset {name} {final.outcome.lower()}; fetched {', '.join(sorted(got)) or 'no report'} and pod logs")
        decision = None if got else kube_pairs.needed(_pod0_log(dest, name))
        if decision is not None:
            # The main phase hung: its JobSet gave the nodes back; the search runs one JobSet per pair.
            judge_name = kube_pairs.run(
                api,
                outs,
                job,
                run_id,
                decision,
                dest,
                image=args.image,
                poll_s=args.poll,
                timeout_s=timeout,
                say=say,
            )
            made.append(judge_name)
            got = kube.fetch(api, ns, judge_name, dest)
            say(f"jobset {judge_name} ended; fetched {', '.join(sorted(got)) or 'no report'}")
        if got:
            _name_nodes(api, ns, name, outs.nodes, dest, say)
            _admit_passed(api, dest, say)
        if got and not args.no_drain:
            _taint_failed(api, dest, say)
    finally:
        if args.delete:
            # The main JobSet last: it owns the code ConfigMap the others mount.
            for made_name in reversed(made):
                api.delete_jobset(ns, made_name)
                say(f"deleted jobset {made_name}" + (" (and its ConfigMap)" if made_name == name else ""))


def _pod0_log(dest: Path, jobset: str) -> str:
    """Pod 0's log as kube.fetch kept it (``<jobset>-<rjob>-0-0-<suffix>.log``)."""
    logs = sorted((dest / "logs").glob(f"{jobset}-{vjob.JOBSET_REPLICATED_JOB}-0-0-*.log"))
    return logs[0].read_text(encoding="utf-8") if logs else ""


def _name_nodes(api: Any, namespace: str, jobset: str, nodes: int, dest: Path, say: Callable[[str], None]) -> None:
    """Key the fetched report by the Kubernetes node each pod ran on, as the scheduler names it
    (the pod's ``spec.nodeName``, read from the API), the pod's host name kept beside it (``pod``):
    what heal acts on, and what ``validate diff`` and a later run compare, since a pod's name changes
    every run. The ranks report under their pod's host name, the only name a pod knows before it
    is scheduled; the judge's pod has no API access, so the names are put in here."""
    report = dest / "report.json"
    doc = json.loads(report.read_text(encoding="utf-8"))
    by_index = kube.pod_nodes(api, namespace, jobset)
    where = {
        h: by_index[i]
        for i, h in enumerate(vjob.pod_hostnames(jobset, vjob.JOBSET_REPLICATED_JOB, nodes))
        if i in by_index
    }
    unplaced = []
    for n in doc.get("nodes", []):
        pod = str(n.get("node"))
        if pod in where:
            n["node"], n["pod"] = where[pod], pod
        elif pod.startswith(f"{jobset}-"):
            unplaced.append(pod)
    for m in doc.get("measurements", []):
        kind, sep, rest = str(m.get("scope", "")).partition(":")
        if not sep or kind not in ("node", "gpu", "pair"):
            continue
        if kind == "pair":
            m["scope"] = "pair:" + "+".join(where.get(x, x) for x in rest.split("+"))
        else:
            head, slash, tail = rest.partition("/")
            m["scope"] = f"{kind}:{where.get(head, head)}{slash}{tail}"
    if isinstance(doc.get("stack"), dict):
        doc["stack"] = {where.get(k, k): v for k, v in doc["stack"].items()}
    for g in doc.get("gate") or []:
        if isinstance(g, dict) and str(g.get("node")) in where:
            g["node"], g["pod"] = where[str(g["node"])], g["node"]
    doc["pods"] = dict(sorted(where.items()))
    new_ecc = _ecc_since(doc, dest)
    report.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = dest / "report.md"
    if md.is_file() and where:
        rows = "".join(f"| {pod} | {node} |\n" for pod, node in sorted(where.items()))
        md.write_text(
            md.read_text(encoding="utf-8") + f"\n## Kubernetes nodes\n\n| pod | node |\n|---|---|\n{rows}",
            encoding="utf-8",
        )
    if new_ecc and md.is_file():
        md.write_text(
            md.read_text(encoding="utf-8") + "".join(f"\nWARN: {line}\n" for line in new_ecc), encoding="utf-8"
        )
    for line in new_ecc:
        say(line)
    if unplaced:
        say(f"pods {', '.join(unplaced)}: no node recorded for them (never scheduled): named by pod in the report")


def _ecc_since(doc: dict[str, Any], dest: Path) -> list[str]:
    """The lifetime ECC comparison the judge's pod could not make (its previous reports name pods,
    which change every run): each GPU's uncorrectable count against the previous report fetched
    beside ``dest``, now both keyed by node (gpu_cluster.workloads.validate.certificate's rule: more than it
    recorded is a new error, a warning). Marks ``doc`` and returns one line a new error."""
    prev = certificate.previous(dest)
    if prev is None:
        return []
    found: list[str] = []
    nodes = {str(n.get("node")): n for n in doc.get("nodes", []) if isinstance(n, dict)}
    for g in doc.get("gate") or []:
        node = str(g.get("node"))
        for scope, value in sorted((g.get("ecc_aggregate") or {}).items()):
            before = prev.ecc_aggregate.get(node, {}).get(scope)
            if before is None or not isinstance(value, int) or value <= before:
                continue
            detail = (
                f"{value - before} new uncorrectable ECC error(s) since run {prev.run} (lifetime {before} -> {value})"
            )
            m = Measurement(
                check="gate.ecc.aggregate",
                scope=certificate.gpu_scope(node, scope),
                value=float(value),
                unit="",
                basis="node gate",
                verdict=Verdict.WARN,
                detail=detail,
            )
            doc.setdefault("measurements", []).append(m.to_json())
            entry = nodes.get(node)
            if entry is not None:
                entry.setdefault("reasons", []).append(f"gate ecc.aggregate ({scope}): {detail}")
                if entry.get("verdict") == "PASS":
                    entry["verdict"] = "WARN"
            if doc.get("verdict") == "PASS":
                doc["verdict"] = "WARN"
            found.append(f"{node} {scope}: {detail}")
    return found


def _taint_failed(api: Any, dest: Path, say: Callable[[str], None]) -> None:
    """What the judge's --drain does on Slurm, done here (the pods have no credentials): each FAIL
    node of the report (a Kubernetes node, :func:`_name_nodes`) tainted NoSchedule
    (gpu_cluster.workloads.validate.kube.TAINT); the report says so. A pod no node was recorded for (it was
    never scheduled) has no node to taint."""
    report = dest / "report.json"
    doc = json.loads(report.read_text(encoding="utf-8"))
    failed = [n for n in doc.get("nodes", []) if n.get("verdict") == "FAIL"]
    if not failed:
        return
    drained = list(doc.get("drained") or [])
    for n in failed:
        if "pod" not in n:
            say(f"{n.get('node')}: failed, but no node is recorded for its pod: taint it by hand")
            continue
        node = str(n["node"])
        fresh = kube.taint(api, node)
        say(f"{n['pod']}: failed; node {node} " + ("tainted " if fresh else "already tainted ") + kube.TAINT_TEXT)
        drained.append(node)
    doc["drained"] = sorted(set(drained))
    report.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = dest / "report.md"
    if md.is_file() and doc["drained"]:
        md.write_text(md.read_text(encoding="utf-8") + f"\nTainted {kube.TAINT_TEXT}: {', '.join(doc['drained'])}.\n")


def _admit_passed(api: Any, dest: Path, say: Callable[[str], None]) -> None:
    """Only a passed check admits a node to work (issue 41, I6): each node of the report the judge
    passed (PASS, or WARN: above its fail floors) has the registration taint its pool put on it
    removed and read back (:func:`gpu_cluster.workloads.validate.kube.admit`). A FAIL or UNKNOWN node keeps it,
    and so does a node no pod was recorded on. The report lists the nodes admitted (``admitted``)."""
    report = dest / "report.json"
    doc = json.loads(report.read_text(encoding="utf-8"))
    admitted = list(doc.get("admitted") or [])
    for n in doc.get("nodes", []):
        if n.get("verdict") not in ("PASS", "WARN") or "pod" not in n:
            continue
        node = str(n["node"])
        done = kube.admit(api, node)
        if done is None:
            say(
                f"{node}: passed, but its {UNVALIDATED_TAINT_KEY} taint is still on it after removing it: remove it by hand"
            )
            continue
        if done:
            say(f"{node}: passed; {UNVALIDATED_TAINT_KEY} taint removed (read back): it takes work now")
        admitted.append(node)
    if not admitted:
        return
    doc["admitted"] = sorted(set(admitted))
    report.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = dest / "report.md"
    if md.is_file():
        md.write_text(
            md.read_text(encoding="utf-8") + f"\nAdmitted to work (no {UNVALIDATED_TAINT_KEY} taint): "
            f"{', '.join(doc['admitted'])}.\n",
            encoding="utf-8",
        )
