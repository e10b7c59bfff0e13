"""After a hang on Kubernetes: the pairwise search, one JobSet per pair, run by ``submit``.

The main JobSet holds every node's GPUs while it runs and its pods carry no API token, so it
cannot run the search one job per pair itself. After a hang its pairs gate ends it on every pod
(``validate pair-gate``; pod 0 prints :data:`pair_jobs.NEEDED`), and ``submit``, which has the
user's kubeconfig, does here what the Slurm batch host does with ``srun`` steps
(:mod:`gpu_cluster.workloads.validate.pair_jobs`): each round's pairs as JobSets at once
(``gpu_cluster.workloads.launch.validation.pair_jobset``: two one-pod jobs pinned by ``kubernetes.io/hostname``
to the nodes the main job's pods ran on, reporting under those pods' names), followed through a
watch until each has ended, each pair's figure read from its log (:data:`pair_jobs.RESULT`), each
deleted (with its pods gone) before the next round asks for the same nodes. Then one pod writes
the search into the run directory and runs the judge (``judge_jobset``), whose report comes back
through its log as the main JobSet's would have.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import isolate, kube, pair_jobs

PAIRS_OF = "gpu-cluster.io/pairs-of"
"""Label on every pair JobSet: the main JobSet it searches for (what the watch selects)."""
STARTUP_S = 600.0
"""Beyond a pair step's own limit, what a pair JobSet may take to be scheduled and pull its image."""


def needed(pod0_log: str) -> dict[str, Any] | None:
    """The gate's decision from pod 0's log, when it asked for the pairs."""
    for line in reversed(pod0_log.splitlines()):
        if line.startswith(pair_jobs.NEEDED):
            doc = json.loads(line[len(pair_jobs.NEEDED) :])
            return doc if isinstance(doc, dict) and doc.get("needed") else None
    return None


def pair_value(log: str, a: str, b: str) -> float | None:
    """The figure a pair job printed; None when it printed none (it hung or failed)."""
    for line in reversed(log.splitlines()):
        if line.startswith(pair_jobs.RESULT):
            doc = json.loads(line[len(pair_jobs.RESULT) :])
            if doc.get("pair") == f"{a}+{b}":
                v = doc.get("value")
                return None if v is None else float(v)
    return None


def _ended(js: Mapping[str, Any]) -> str | None:
    for cond in (js.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Completed", "Failed"):
            return str(cond["type"])
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class KubePairs:
    api: kube.Api
    outputs: ClusterOutputs
    job: vjob.ValidationJob
    run_id: str
    image: str | None
    hosts: Mapping[str, str]
    """Main job pod host name -> the Kubernetes node it ran on."""
    wait_s: float
    """How long one round may take before its pairs count as hung."""
    logs: Path
    """Where each pair pod's log is kept on this machine."""
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    @property
    def namespace(self) -> str:
        return str(self.outputs.scheduler.namespace)

    @property
    def main(self) -> str:
        return vjob.jobset_name(self.run_id)

    def run_round(self, rnd: list[isolate.Pair]) -> dict[isolate.Pair, float | None]:
        names: dict[str, isolate.Pair] = {}
        for a, b in rnd:
            manifest, policy = vjob.pair_jobset(
                self.outputs, self.job, self.run_id, a, b, hosts=self.hosts, image=self.image
            )
            manifest["metadata"]["labels"][PAIRS_OF] = self.main
            # The policy first: no pod of the pair is ever unprotected; then the JobSet owns it.
            self.api.create_networkpolicy(self.namespace, policy)
            made = self.api.create_jobset(self.namespace, manifest)
            self.api.set_networkpolicy_owner(self.namespace, policy["metadata"]["name"], kube.owner(made))
            names[manifest["metadata"]["name"]] = (a, b)
            self.say(
                f"pair {a}+{b}: jobset {manifest['metadata']['name']} on "
                f"{self.hosts.get(a, '?')} and {self.hosts.get(b, '?')}"
            )
        outcome = self._wait(set(names))
        values: dict[isolate.Pair, float | None] = {}
        for name, (a, b) in names.items():
            text = ""
            for pod in self.api.list_pods(self.namespace, f"{kube.NAME_LABEL}={name}"):
                pod_name = pod["metadata"]["name"]
                log = self.api.pod_log(self.namespace, pod_name)
                self.logs.mkdir(parents=True, exist_ok=True)
                (self.logs / f"{pod_name}.log").write_text(log, encoding="utf-8")
                text += log
            values[(a, b)] = pair_value(text, a, b)
            got = values[(a, b)]
            self.say(
                f"pair {a}+{b}: jobset {outcome.get(name, 'did not end in time').lower()}; "
                + ("no result (hung or failed)" if got is None else f"{got:g}")
            )
        for name in names:
            self.api.delete_jobset(self.namespace, name)
        self._gone(set(names))
        return values

    def _wait(self, names: set[str]) -> dict[str, str]:
        """Each JobSet's end (Completed or Failed), through a watch; those not ended in ``wait_s``
        are left out (their pairs count as hung)."""
        ended: dict[str, str] = {}
        deadline = self.clock() + self.wait_s
        while names - set(ended) and self.clock() < deadline:
            left = max(1.0, deadline - self.clock())
            for js in self.api.watch_jobsets(self.namespace, f"{PAIRS_OF}={self.main}", min(left, 300.0)):
                name = js.get("metadata", {}).get("name")
                if name in names and (how := _ended(js)) is not None:
                    ended[name] = how
                if not names - set(ended):
                    break
        return ended

    def _gone(self, names: set[str]) -> None:
        """Wait until the deleted pair JobSets' pods are gone: the next round asks for the same nodes."""
        deadline = self.clock() + 300.0
        while self.clock() < deadline:
            left = [n for n in names if self.api.list_pods(self.namespace, f"{kube.NAME_LABEL}={n}")]
            if not left:
                return
            self.sleep(2.0)
        self.say(f"pair jobsets {', '.join(sorted(names))}: pods still terminating after 300 s; going on")


def hosts_of(api: kube.Api, namespace: str, run_id: str, nodes: Sequence[str]) -> dict[str, str]:
    """Main job pod host name -> Kubernetes node, from its pods' ``spec.nodeName``."""
    by_index = kube.pod_nodes(api, namespace, vjob.jobset_name(run_id))
    return {name: by_index[i] for i, name in enumerate(nodes) if i in by_index}


def run(
    api: kube.Api,
    outputs: ClusterOutputs,
    job: vjob.ValidationJob,
    run_id: str,
    decision: Mapping[str, Any],
    dest: Path,
    *,
    image: str | None,
    poll_s: float,
    timeout_s: float,
    say: Callable[[str], None] = print,
) -> str:
    """The search one JobSet per pair, then the judge's JobSet; its name (its log holds the report)."""
    nodes = [str(n) for n in decision.get("nodes") or []]
    hosts = hosts_of(api, str(outputs.scheduler.namespace), run_id, nodes)
    missing = [n for n in nodes if n not in hosts]
    if missing:
        say(f"pods {', '.join(missing)}: no node recorded for them; their pairs are placed by the scheduler")
    typed = ("--instance-type", job.instance_type) if job.instance_type else ()
    run_args = (*typed, *job.run_args)
    cfg = pair_jobs.run_config(Path(job.workdir), run_args)
    step_s = pair_jobs.step_time_limit_min(cfg, cfg.timeout_s) * 60.0
    driver = KubePairs(
        api=api,
        outputs=outputs,
        job=job,
        run_id=run_id,
        image=image,
        hosts=hosts,
        wait_s=step_s + STARTUP_S,
        logs=dest / "logs",
        say=say,
    )
    pair_jobs.search_with(dest, nodes, run_args, driver.run_round, say=say)
    # What search_with kept here is what the judge reads there.
    doc = json.loads((dest / "phase-pairs.json").read_text(encoding="utf-8"))
    encoded = base64.b64encode(json.dumps(doc).encode("utf-8")).decode("ascii")
    manifest, policy = vjob.judge_jobset(outputs, job, run_id, encoded, image=image)
    ns, name = str(manifest["metadata"]["namespace"]), str(manifest["metadata"]["name"])
    api.create_networkpolicy(ns, policy)
    made = api.create_jobset(ns, manifest)
    api.set_networkpolicy_owner(ns, policy["metadata"]["name"], kube.owner(made))
    say(f"created jobset {name}: the search's result into the run directory, then the judge")
    kube.follow(api, ns, name, expected_nodes=1, poll_s=poll_s, timeout_s=timeout_s, say=say)
    return name
