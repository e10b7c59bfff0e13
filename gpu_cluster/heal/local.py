"""The rehearsal on this machine: ``gpu-cluster heal --local``.

The nodes are real local torchrun agents, as ``validate --local`` runs them (``local-1`` ..
``local-N``); what stands in for a cloud and a scheduler is a file, ``local-cluster.json`` in the
run directory, that says which instance each node slot runs on, which faults that instance has,
and whether the scheduler drained it. A fault belongs to an instance: ``--fault local-3:slow``
gives ``local-3``'s first instance the test hook that makes a node a straggler
(workloads/runtime/node.py, ``GPUC_INJECT_SLOW_NODE``), and a replacement is a fresh instance in
the same slot without it. Every job (the validation, a second look, a revalidation) is started
with the hooks of the instances it runs on, so what the judge sees is what the file says.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_cluster.heal.adapters import CheckResult, Instance, NodeState, Outcome, Progress
from gpu_cluster.heal.evidence import judge_pair

WORLD = "local-cluster.json"
# The test hooks a fault sets on the node it names (workloads/runtime/node.py).
FAULTS: dict[str, dict[str, str]] = {
    "slow": {"GPUC_INJECT_SLOW_NODE": "{node}", "GPUC_INJECT_SLOW_MS": "100"},
    # a node that lost power: dead in the main phase and in the pairwise search that would clear it
    "dead": {"GPUC_INJECT_FAIL_NODE": "{node}", "GPUC_INJECT_FAIL_PHASE": "main,pairs"},
}
_FAULT_RE = re.compile(r"^(local-\d+):([a-z]+)$")
MARK = "gpu-cluster heal "


class LocalError(ValueError):
    """Bad --local input; one line with what is allowed."""


def parse_faults(specs: list[str], nodes: int) -> dict[str, list[str]]:
    """``NODE:KIND`` flags to node -> kinds; every problem at once."""
    out: dict[str, list[str]] = {}
    bad: list[str] = []
    by_kind: dict[str, str] = {}
    names = [f"local-{i + 1}" for i in range(nodes)]
    for spec in specs:
        m = _FAULT_RE.match(spec)
        if not m:
            bad.append(f"--fault {spec!r}: expected NODE:KIND, e.g. local-3:slow")
            continue
        node, kind = m.groups()
        if node not in names:
            bad.append(f"--fault {spec!r}: no node {node} among --nodes {nodes} (allowed: {', '.join(names)})")
        elif kind not in FAULTS:
            bad.append(f"--fault {spec!r}: unknown kind {kind!r} (allowed: {', '.join(FAULTS)})")
        elif kind in by_kind and by_kind[kind] != node:
            bad.append(f"--fault {spec!r}: {kind} is already on {by_kind[kind]} (the test hook names one node)")
        else:
            by_kind[kind] = node
            out.setdefault(node, []).append(kind)
    if bad:
        raise LocalError("; ".join(bad))
    return out


@dataclass(slots=True)
class LocalCluster:
    """The file that stands for the cloud and the scheduler of the local nodes."""

    path: Path
    doc: dict[str, Any]

    @classmethod
    def open(cls, run_dir: Path, nodes: int, faults: Mapping[str, list[str]]) -> LocalCluster:
        path = run_dir / WORLD
        if path.exists():
            doc = json.loads(path.read_text(encoding="utf-8"))
            made = doc.get("made_with", {})
            if made.get("nodes") != nodes or made.get("faults") != {k: sorted(v) for k, v in faults.items()}:
                raise LocalError(
                    f"{run_dir} holds a local cluster made with --nodes {made.get('nodes')} and faults "
                    f"{made.get('faults') or 'none'}: rerun with those, or use another --out for a new one"
                )
            return cls(path, doc)
        doc = {
            "made_with": {"nodes": nodes, "faults": {k: sorted(v) for k, v in faults.items()}},
            "nodes": {
                f"local-{i + 1}": {"instance": f"local-{i + 1}.i0", "faults": sorted(faults.get(f"local-{i + 1}", []))}
                for i in range(nodes)
            },
            "drained": {},
            "replacements": {},
        }
        world = cls(path, doc)
        world.save()
        return world

    def save(self) -> None:
        tmp = self.path.with_name(f".{WORLD}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    @property
    def names(self) -> list[str]:
        return list(self.doc["nodes"])

    def env_for(self, nodes: list[str]) -> dict[str, str]:
        """The test hooks of the instances ``nodes`` run on now."""
        env: dict[str, str] = {}
        for n in nodes:
            for kind in self.doc["nodes"][n]["faults"]:
                env.update({k: v.format(node=n) for k, v in FAULTS[kind].items()})
        return env


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set for the agents this process starts (they inherit os.environ), then undone."""
    keys = [k for k in os.environ if k.startswith("GPUC_INJECT_")]
    saved = {k: os.environ.pop(k) for k in keys}
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


class LocalScheduler:
    """Drains and resumes in the file, as ``scontrol update state=drain|resume`` would."""

    kind = "local"

    def __init__(self, world: LocalCluster) -> None:
        self.world = world

    def node(self, name: str) -> NodeState:
        rec = self.world.doc["nodes"].get(name)
        if rec is None:
            return NodeState(node=name, present=False, detail=f"the local cluster has {', '.join(self.world.names)}")
        reason = self.world.doc["drained"].get(name, "")
        held = reason[len(MARK) :].split(":", 1)[0] if reason.startswith(MARK) else None
        return NodeState(
            node=name,
            present=True,
            ready=True,
            in_service=not reason,
            held_by=held,
            instance=rec["instance"],
            detail=f"drained by {held or 'someone else'}" if reason else "idle",
        )

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        reason = f"{MARK}{incident}: {why}"[:200]
        self.world.doc["drained"][name] = reason
        self.world.save()
        # Work on the node (``jobs`` in the file, as a test puts it there) keeps it draining, as a
        # Slurm job keeps a DRAIN node DRAINING until it ends.
        jobs = self.world.doc.get("jobs", {}).get(name, [])
        if jobs:
            return Outcome(ok=False, pending=True, detail=f"draining; still running: {', '.join(jobs)}")
        return Outcome(ok=True, detail=f"drained (reason {reason!r}); the next rounds pair only in-service nodes")

    def release(self, name: str, incident: str) -> Outcome:
        view = self.node(name)
        if view.held_by not in (incident, None):
            return Outcome(ok=False, detail=f"its drain reason is another incident's: {view.detail}")
        self.world.doc["drained"].pop(name, None)
        self.world.save()
        return Outcome(ok=True, detail="resumed: idle, in service")

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        return slot_node  # a local node keeps its name, as a Slurm or GKE node does

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        return Outcome(ok=True, detail="local agents take any node")

    def close_check(self, name: str, peer: str, incident: str) -> None:
        # As on Slurm (slurm.py close_check): the checked node is left drained with the incident's
        # mark, out of service until heal returns it, whatever the check found.
        if name not in self.world.doc["drained"]:
            self.world.doc["drained"][name] = f"{MARK}{incident}: checked; awaiting heal"
            self.world.save()


class LocalCloud:
    """A replacement is a new instance record in the same slot, without the old one's faults;
    the token makes it happen once however often it is asked."""

    name = "local"
    call = "local-cluster.json: a fresh instance in the slot (the rehearsal's stand-in for the cloud's call)"

    def __init__(self, world: LocalCluster) -> None:
        self.world = world

    def instance(self, node: NodeState) -> Instance:
        rec = self.world.doc["nodes"].get(node.node, {})
        return Instance(id=str(rec.get("instance", "")), state="running")

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        reps = self.world.doc["replacements"]
        if token not in reps:
            slot = node.node
            n = 1 + sum(1 for r in reps.values() if r["node"] == slot)
            new = f"{slot}.i{n}"
            reps[token] = {"node": slot, "old": instance.id, "new": new, "at": time.time()}
            self.world.doc["nodes"][slot] = {"instance": new, "faults": []}
            self.world.save()
        rec = reps[token]
        return Outcome(ok=True, detail=f"{rec['old']} replaced by {rec['new']} (token {token})", extra={"op": token})

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        rec = self.world.doc["replacements"].get(token)
        now = self.world.doc["nodes"].get(node.node, {}).get("instance", "")
        if rec is not None or (old and now and now != old):
            return Progress(started=True, new_instance=now if now != old else "", detail=f"instance now {now}")
        return Progress(started=False, detail=f"instance still {now}")

    def replace_estimate(self) -> tuple[float, str]:
        return 0.0, "a local replacement is a new record in local-cluster.json, at once"


class LocalChecker:
    """The node gate and a pair test: the validation's main phase on two local agents (the node
    and a cleared peer, pairwise search off), judged as a strict CPU run, so a straggler FAILs."""

    def __init__(self, world: LocalCluster, run_dir: Path, procs: int, timeout: float) -> None:
        self.world = world
        self.run_dir = run_dir
        self.procs = procs
        self.timeout = timeout

    def estimate(self) -> tuple[float, str]:
        from gpu_cluster.workloads.validate.__main__ import _phase_deadline

        return _phase_deadline(self.timeout), "the local harness's deadline for one phase"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        from gpu_cluster.workloads.validate import report as vreport
        from gpu_cluster.workloads.validate.__main__ import _phase_deadline, _start_agents, _wait_agents
        from gpu_cluster.workloads.validate.judge import judge

        out = self.run_dir / "checks" / f"{incident}-{purpose}-{self.world.doc['nodes'][node]['instance']}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        run = [
            "-m",
            "gpu_cluster.workloads.validate",
            "run",
            "--out",
            str(out),
            "--phase",
            "main",
            "--timeout",
            str(self.timeout),
        ]
        run += ["--iters", "5", "--warmup", "2", "--pairwise", "never"]
        env = self.world.env_for([node, peer])
        with environment({}):
            agents = _start_agents([node, peer], self.procs, run, env, out / "logs", f"{purpose}-{node}+{peer}")
            codes = _wait_agents(agents, _phase_deadline(self.timeout), f"{purpose} {node}+{peer}")
        rep = judge(out, instance_type=None, local=True, expected_nodes=[node, peer], strict=True)
        vreport.write(rep, out)
        return judge_pair(rep.to_json(), node, peer, str(out / "report.json"), f"exit codes {codes}")
