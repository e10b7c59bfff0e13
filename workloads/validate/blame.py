"""Which node is at fault, from the status lines every rank keeps in the run directory.

A node is blamed when one of its ranks failed on its own (an error not caused by a lost peer),
when a peer's error names its ranks as missing, or when it started a phase and neither finished
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
