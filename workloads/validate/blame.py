"""Which node is at fault, from the status lines every rank keeps in the run directory.

A node is blamed when one of its ranks failed on its own (an error not caused by a lost peer),
when a peer's error names its ranks as missing, when a collective hung and its ranks are the
ones the others waited on (:func:`waited_on`), or when it started a phase and neither finished
nor reported an error (it died: the rank whose heartbeat stopped first). A pair of the pairwise
search whose call hung makes both its nodes suspects. Used by the judge.
"""

from __future__ import annotations

import re
from typing import Any

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


def node_failures(statuses: list[dict[str, Any]], expected_nodes: list[str]) -> tuple[dict[str, str], list[str]]:
    """(node -> why it is blamed, notes). A node is blamed when one of its ranks failed on its own
    (an error not caused by a lost peer), when a peer's error names its ranks as missing, or when
    it started a phase and neither finished nor reported an error (it died)."""
    blamed: dict[str, str] = {}
    notes: list[str] = []
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
            blamed.setdefault(str(by_key[(phase, r)].get("node")), why)
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
    # Ranks that neither finished nor reported: the ones whose heartbeat stopped well before the
    # last one died first; those that beat on until the end were waiting on them.
    last_beat = max((b for *_, b in silent), default=0.0)
    first_beat = min((b for *_, b in silent), default=0.0)
    one_node = len({n for _, _, n, _ in silent}) == 1
    for phase, rank, node, beat in silent:
        # Beats too close together to tell who went first: every silent node is suspect.
        if one_node or last_beat - first_beat <= DEATH_MARGIN_S or beat < last_beat - DEATH_MARGIN_S:
            blamed.setdefault(
                node, f"{phase}: rank {rank} started but never finished nor reported an error (process or node died)"
            )
    seen_nodes = {str(s.get("node")) for s in statuses}
    for n in expected_nodes:
        if n not in seen_nodes:
            blamed.setdefault(n, "no rank on this node reported at all (it never started)")
    if peer_errors and not blamed:
        notes.append(f"{peer_errors} rank(s) lost a peer but no node could be blamed from the files")
    return blamed, notes
