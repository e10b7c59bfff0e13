"""``submit`` on Kubernetes: the validation JobSet created through the cluster's API, followed to
its end and its report fetched; after a hang inside a collective, the pairwise search as one
JobSet per pair and the judge's own (:mod:`workloads.validate.kube_pairs`); the failed nodes
tainted, as the judge's ``--drain`` does on Slurm.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from components.contract import ClusterOutputs
from workloads.launch import bundle as code_bundle
from workloads.launch import validation as vjob
from workloads.launch.validation import ValidationJob
from workloads.validate import kube, kube_pairs


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
    and logs into ``dest``; after a hang, the per-pair JobSets and the judge's; then taint the
    failed nodes (unless ``--no-drain``) and delete what was made (``--delete``)."""
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
        if got and not args.no_drain:
            _taint_failed(api, ns, name, outs.nodes, dest, say)
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


def _taint_failed(api: Any, namespace: str, jobset: str, nodes: int, dest: Path, say: Callable[[str], None]) -> None:
    """What the judge's --drain does on Slurm, done here (the pods have no credentials): each FAIL
    node of the report, a pod host name, mapped to the Kubernetes node its pod ran on and tainted
    NoSchedule (workloads.validate.kube.TAINT); the report says so."""
    report = dest / "report.json"
    doc = json.loads(report.read_text(encoding="utf-8"))
    failed = [str(n["node"]) for n in doc.get("nodes", []) if n.get("verdict") == "FAIL"]
    if not failed:
        return
    by_index = kube.pod_nodes(api, namespace, jobset)
    where = {
        h: by_index[i]
        for i, h in enumerate(vjob.pod_hostnames(jobset, vjob.JOBSET_REPLICATED_JOB, nodes))
        if i in by_index
    }
    drained = list(doc.get("drained") or [])
    for pod in failed:
        node = where.get(pod)
        if node is None:
            say(f"{pod}: failed, but no node is recorded for it: taint it by hand")
            continue
        fresh = kube.taint(api, node)
        say(f"{pod}: failed; node {node} " + ("tainted " if fresh else "already tainted ") + kube.TAINT_TEXT)
        drained.append(node)
    doc["drained"] = sorted(set(drained))
    report.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = dest / "report.md"
    if md.is_file() and doc["drained"]:
        md.write_text(md.read_text(encoding="utf-8") + f"\nTainted {kube.TAINT_TEXT}: {', '.join(doc['drained'])}.\n")
