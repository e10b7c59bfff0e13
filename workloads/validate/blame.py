"""Which node is at fault, from the status lines every rank keeps in the run directory.

A node is blamed when one of its ranks failed on its own (an error not caused by a lost peer),
when a peer's error names its ranks as missing, when a collective hung and its ranks are the
ones the others waited on (:func:`waited_on`), or when it started a phase and neither finished
nor reported an error (it died: the rank whose heartbeat stopped first). A pair of the pairwise
search whose call hung makes both its nodes suspects. Used by the judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_cluster.workloads.validate.agents import AgentLog

_HUNG_PAIR = re.compile(r"pair (\S+?)\+(\S+?): (.*)")


def hung_pairs(statuses: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Pairs of the pairwise search whose call hung (outlived its watchdog, or the backend gave up
    on it): ``(a, b) -> what hung``. Every label and error inside a pair starts ``pair a+b: ``."""
    found: dict[tuple[str, str], str] = {}
    for s in statuses:
        m = _HUNG_PAIR.search(str(s.get("error") or "")) if s.get("state") == "error" else None
        if m is not None:
            found.setdefault(
                (m.group(1), m.group(2)), f"{s.get('phase')}: pair {m.group(1)}+{m.group(2)} hung: {m.group(3)[:200]}"
            )
    return found


def waited_on(statuses: list[dict[str, Any]]) -> tuple[dict[int, str], set[int]]:
    """In one phase that hung: (rank -> why it was the peer the others waited on, ranks that waited).

    Every rank's status keeps the collective calls it entered and completed (``calls``, from the
    watchdog). Ranks inside call N waited on a peer; a rank whose count stopped short of N never
    reached that call: it was the peer (torch's flight recorder reads its per-rank sequence numbers
    the same way). When every rank is inside the same call, the counts cannot tell, and nothing is
    returned: that is the pairwise search's to settle.
    """
    live = [
        s
        for s in statuses
        if s.get("state") != "finished" and isinstance(s.get("calls"), dict) and isinstance(s.get("rank"), int)
    ]
    if len(live) < 2:
        return {}, set()
    entered = {int(s["rank"]): int(s["calls"].get("entered") or 0) for s in live}
    top = max(entered.values())
    completed = {int(s["rank"]): int(s["calls"].get("completed") or 0) for s in live}
    # Waiting means inside the call: ranks that completed every call they entered (those of other
    # pairs of the pairwise search, done with theirs) waited on nobody in a collective.
    ahead = {r for r, e in entered.items() if e == top and completed[r] < e}
    behind = {r: e for r, e in entered.items() if e < top}
    if not behind or not ahead or any(e == top and r not in ahead for r, e in entered.items()):
        return {}, set()
    what = next(str(s["calls"].get("what") or "") for s in live if int(s["rank"]) in ahead)
    waiters = ", ".join(str(r) for r in sorted(ahead)[:8]) + (" ..." if len(ahead) > 8 else "")
    culprits: dict[int, str] = {}
    for s in live:
        r = int(s["rank"])
        if r in behind:
            c = s["calls"]
            inside = int(c.get("completed") or 0) < int(c.get("entered") or 0)
            where = f"stuck inside call #{behind[r]}" if inside else f"stopped after call #{behind[r]}"
            culprits[r] = (
                f"{s.get('phase')}: rank {r} {where} ({c.get('what') or '?'}) while rank(s) {waiters} "
                f"waited in call #{top} ({what}): it was the peer they waited on"
            )
    return culprits, ahead


DEATH_MARGIN_S = 4.0
"""A silent rank whose heartbeat stopped this much earlier than the last one is taken to have died first."""


@dataclass(slots=True)
class Blame:
    failed: dict[str, str] = field(default_factory=dict)
    """Node -> why it is at fault."""
    suspects: dict[str, str] = field(default_factory=dict)
    """Node -> why it may be: it went quiet with every other rank and nothing tested it."""
    notes: list[str] = field(default_factory=list)


def node_failures(statuses: list[dict[str, Any]], expected_nodes: list[str]) -> tuple[dict[str, str], list[str]]:
    """(node -> why it is blamed, notes): :func:`blame` without a pairwise search."""
    b = blame(statuses, expected_nodes)
    return b.failed, b.notes


def blame(
    statuses: list[dict[str, Any]],
    expected_nodes: list[str],
    cleared: Iterable[str] = (),
    agents: Mapping[str, AgentLog] | None = None,
    store_host: str | None = None,
) -> Blame:
    """Who is at fault, from the status lines. A node fails when one of its ranks failed on its own
    (an error not caused by a lost peer), when a peer's error names its ranks as missing, when its
    ranks are the ones a hung collective waited on (:func:`waited_on`), or when it started a phase
    and its heartbeat stopped well before the others' (it died first).

    Ranks that went quiet with every other rank (NCCL tore the whole job down, or each rank's own
    watchdog did: their last beats within DEATH_MARGIN_S) say nothing about who caused it: the
    pairwise search does. A node it ``cleared`` (passed with a known-good partner) is never blamed
    for that silence; one it did not test is a suspect, not a failure.

    A node with no status line at all never started its ranks: with ``agents`` (what each node's
    torchrun agent log shows, :mod:`gpu_cluster.workloads.validate.agents`), a node whose agent reached a
    rendezvous that never completed is not blamed (it waited for another node), and only the nodes
    whose agent never started, or failed before the rendezvous, fail; with no agent log kept and no
    rank of any node reporting, such nodes are suspects and the verdict cannot name one. An agent
    that timed out, found the rendezvous closed or lost its store is a witness; when no agent could
    reach the store at all, ``store_host`` (the job's first node, which hosts it) is the suspect."""
    out = Blame()
    blamed = out.failed
    notes = out.notes
    cleared = set(cleared)
    rank_node = {int(s["rank"]): str(s["node"]) for s in statuses if "rank" in s and "node" in s}
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    for s in statuses:
        by_key[(str(s.get("phase")), int(s.get("rank", -1)))] = s
    # A hung collective, read from the calls each rank entered: the ranks that never reached the
    # call the others waited in are blamed; those that waited are not, whatever ended them.
    explained: set[tuple[str, int]] = set()
    for phase in sorted({p for p, _ in by_key}):
        culprits, waiters = waited_on([s for (p, _), s in by_key.items() if p == phase])
        for r, why in culprits.items():
            node = str(by_key[(phase, r)].get("node"))
            if node in cleared:
                out.suspects.setdefault(node, f"{why}; but it passed the pairwise search, so it is not failed")
            else:
                blamed.setdefault(node, why)
        explained |= {(phase, r) for r in [*culprits, *waiters]} if culprits else set()
    peer_errors = 0
    silent: list[tuple[str, int, str, float]] = []
    # Phases in which a rank failed on its own before the group formed (no device): ranks of
    # other nodes that never joined in that phase were waiting for it, whatever ended them.
    failed_before_join = {
        str(s.get("phase"))
        for s in statuses
        if s.get("state") == "error"
        and not s.get("peer_lost")
        and "joined" not in (s.get("stages") or {})
        and "stages" in s
    }
    for (phase, rank), s in sorted(by_key.items()):
        node = str(s.get("node"))
        state = s.get("state")
        if (phase, rank) in explained:
            continue
        if state == "error":
            missing = [int(r) for r in s.get("missing_ranks") or []]
            if missing:
                for r in missing:
                    n = rank_node.get(r, f"rank {r}")
                    blamed.setdefault(n, f"{phase}: rank {r} did not arrive (reported by rank {rank} on {node})")
            elif s.get("peer_lost"):
                peer_errors += 1
            elif s.get("fabric_missing"):
                # The start-up check's message names what is missing; keep all of it.
                blamed.setdefault(node, f"{phase}: rank {rank} lacks its fabric: {s.get('error', '')[:600]}")
            else:
                blamed.setdefault(node, f"{phase}: rank {rank} failed: {s.get('error', '')[:200]}")
        elif state in ("started", "device-ready", "fabric-ready") and phase in failed_before_join:
            peer_errors += 1  # waiting to join a node that could not start
        elif state in ("started", "device-ready", "fabric-ready", "joined"):
            silent.append((phase, rank, node, float(s.get("beat") or s.get("at") or 0.0)))
    # Ranks that neither finished nor reported, judged phase by phase: each step is its own job with
    # its own clock, so a later step torn down by the same fault is never read as the main phase's
    # ranks having "died first". Within a phase, the ones whose heartbeat stopped well before the
    # last one died first; those that beat on until the end were waiting on them.
    quiet_cleared: set[str] = set()
    for phase in sorted({p for p, *_ in silent}):
        in_phase = [t for t in silent if t[0] == phase]
        last_beat = max(b for *_, b in in_phase)
        first_beat = min(b for *_, b in in_phase)
        one_node = len({n for _, _, n, _ in in_phase}) == 1
        together = not one_node and last_beat - first_beat <= DEATH_MARGIN_S
        for _, rank, node, beat in in_phase:
            where = s_where(silent_state(by_key, phase, rank))
            if node in blamed:
                continue
            if together:
                if node in cleared:
                    quiet_cleared.add(node)
                    continue
                out.suspects.setdefault(
                    node,
                    f"{phase}: rank {rank} went quiet {where} with every other rank (the whole job was torn down "
                    "at once: NCCL's abort or the watchdogs), and the pairwise search did not test this node",
                )
            elif one_node or beat < last_beat - DEATH_MARGIN_S:
                why = f"{phase}: rank {rank} started but never finished nor reported an error {where} (process or node died)"
                if node in cleared:
                    # It passed the pairwise search with a known-good partner: a hang is not proof
                    # enough to drain it.
                    out.suspects.setdefault(node, f"{why}; but it passed the pairwise search, so it is not failed")
                else:
                    blamed.setdefault(node, why)
    if quiet_cleared:
        notes.append(
            f"{len(quiet_cleared)} node(s) went quiet with every other rank and passed the pairwise search "
            f"with a known-good partner: not blamed ({', '.join(sorted(quiet_cleared)[:8])}"
            f"{' ...' if len(quiet_cleared) > 8 else ''})"
        )
    seen_nodes = {str(s.get("node")) for s in statuses}
    never = [n for n in expected_nodes if n not in seen_nodes]
    kept = agents is not None and any(n in agents for n in expected_nodes)
    for n in never:
        log = agents.get(n) if agents is not None else None
        if not kept:
            if seen_nodes:
                blamed.setdefault(n, "no rank on this node reported at all (it never started)")
            else:
                out.suspects.setdefault(
                    n,
                    "no rank of any node reported (the rendezvous never completed) and no torchrun agent log "
                    f"(agents/main-{n}.log) says whether this node joined it: that log is the missing evidence",
                )
        elif log is None:
            blamed.setdefault(
                n,
                f"its torchrun agent never started: no agents/main-{n}.log, while the other nodes' agents "
                "reached the rendezvous (a pod that never ran, a node the scheduler could not launch on)",
            )
        elif not log.reached:
            blamed.setdefault(n, f"its torchrun agent {log.evidence}")
        elif seen_nodes:
            blamed.setdefault(n, f"no rank on this node reported at all, though its agent {log.evidence}")
        # else: it reached a rendezvous that never completed: it waited for the node that did not come.
    logs = [agents[n] for n in never if agents is not None and n in agents and n != store_host]
    if kept and not seen_nodes and logs and store_host and all(a.outcome == "no-store" for a in logs):
        # No agent reached the store: its host is where to look (unless it is already named).
        if store_host not in blamed:
            where = next((a.store for a in logs if a.store), "")
            out.suspects.setdefault(
                store_host,
                f"it hosts the rendezvous store{f' ({where})' if where else ''} and none of the {len(logs)} "
                "other agents could reach it (RendezvousConnectionError creating the c10d store)",
            )
    if peer_errors and not blamed:
        notes.append(f"{peer_errors} rank(s) lost a peer but no node could be blamed from the files")
    return out


def silent_state(by_key: Mapping[tuple[str, int], Mapping[str, Any]], phase: str, rank: int) -> Mapping[str, Any]:
    return by_key.get((phase, rank), {})


def s_where(s: Mapping[str, Any]) -> str:
    """Where a silent rank was, from its status: the watchdog's label when it was inside one."""
    calls = s.get("calls") or {}
    label = calls.get("in") if isinstance(calls, Mapping) else None
    if label:
        return f"inside {label}"
    return f"after '{s.get('state')}'"
