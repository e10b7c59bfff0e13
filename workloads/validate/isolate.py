"""Find the bad node: pairwise tests, then a second pass pairing each suspect with a node that passed.

The approach of Google's cluster-health-scanner and Meta's GCM check-nccl: a slow link or
a sick host drags every collective it joins, so a whole-cluster figure says "something is
wrong" but not where. Testing disjoint pairs at once narrows it to pairs; pairing each node of
a bad pair with a node known to be good names the culprit. Everything here is pure: the
caller supplies ``measure``, which runs one round of disjoint pairs at once (on every rank of
the job, in the same order, so all ranks take the same decisions) and returns each pair's
figure, or None when the pair failed outright.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

Pair = tuple[str, str]
Measure = Callable[[list[Pair]], Mapping[Pair, float | None]]

RELATIVE_FLOOR = 0.5
"""Without a catalog floor, a pair is suspect below this fraction of the median pair."""


@dataclass(slots=True)
class Isolation:
    pair_results: dict[Pair, float | None] = field(default_factory=dict)
    second_pass: dict[Pair, float | None] = field(default_factory=dict)
    floor: float | None = None
    floor_basis: str = ""
    good: set[str] = field(default_factory=set)
    bad: dict[str, str] = field(default_factory=dict)
    """Node -> why it was named."""
    unresolved: dict[str, str] = field(default_factory=dict)
    bad_links: dict[Pair, str] = field(default_factory=dict)
    """Pairs that fell short although both nodes passed with a known-good partner: the link between them."""
    rounds: int = 0
    """Rounds of disjoint pairs the search ran (first pass plus second pass)."""


def first_pass_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Disjoint neighbour pairs; with an odd count the last node pairs with the first, in a second round."""
    nodes = list(nodes)
    first = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    rounds = [first] if first else []
    if len(nodes) % 2 == 1 and len(nodes) > 1:
        rounds.append([(nodes[-1], nodes[0])])
    return rounds


def second_pass_rounds(suspects: Sequence[str], good: Sequence[str]) -> list[list[Pair]]:
    """Each suspect with a distinct good node per round, as many at once as there are good nodes."""
    rounds: list[list[Pair]] = []
    pending = list(suspects)
    good = list(good)
    while pending and good:
        batch, pending = pending[: len(good)], pending[len(good) :]
        rounds.append([(s, good[i]) for i, s in enumerate(batch)])
    return rounds


def _floor(values: Sequence[float | None], floor: float | None) -> tuple[float | None, str]:
    if floor is not None:
        return floor, "catalog floor"
    measured = [v for v in values if v is not None]
    if len(measured) < 2:
        return None, "no floor (too few pairs to compare)"
    return RELATIVE_FLOOR * statistics.median(measured), f"{RELATIVE_FLOOR:g} x the median pair"


def order(nodes: Sequence[str], pairing: str, seed: int = 0) -> list[str]:
    """'topology': as given (the caller lists nodes so neighbours share a switch); 'random': shuffled
    with a seed every rank shares, so that repeated runs test different links."""
    nodes = list(nodes)
    if pairing == "random":
        random.Random(seed).shuffle(nodes)
    return nodes


def isolate(nodes: Sequence[str], measure: Measure, floor: float | None) -> Isolation:
    out = Isolation()
    for rnd in first_pass_rounds(nodes):
        out.pair_results.update(measure(rnd))
        out.rounds += 1
    out.floor, out.floor_basis = _floor(list(out.pair_results.values()), floor)

    def ok(value: float | None) -> bool:
        return value is not None and (out.floor is None or value >= out.floor)

    suspects: list[str] = []
    for (a, b), value in out.pair_results.items():
        if ok(value):
            out.good.update((a, b))
    for (a, b), value in out.pair_results.items():
        if not ok(value):
            suspects.extend(n for n in (a, b) if n not in out.good and n not in suspects)
    if not suspects:
        return out
    if not out.good:
        for s in suspects:
            out.unresolved[s] = "every pair fell short; no known-good node to compare with"
        return out
    for rnd in second_pass_rounds(suspects, sorted(out.good)):
        out.second_pass.update(measure(rnd))
        out.rounds += 1
    for (suspect, partner), value in out.second_pass.items():
        if ok(value):
            out.good.add(suspect)
        else:
            shown = "failed" if value is None else f"{value:.2f}"
            out.bad[suspect] = (
                f"pair with known-good {partner}: {shown} (floor {out.floor:.2f}, {out.floor_basis})"
                if out.floor is not None
                else f"pair with known-good {partner}: {shown}"
            )
    for (a, b), value in out.pair_results.items():
        if not ok(value) and a not in out.bad and b not in out.bad and a in out.good and b in out.good:
            shown = "failed" if value is None else f"{value:.2f}"
            out.bad_links[(a, b)] = (
                f"{a}+{b}: {shown} together, both pass with a known-good partner (the link or switch port)"
            )
    return out


def stragglers(
    per_node: Mapping[str, float | None], floor: float | None, relative: float = RELATIVE_FLOOR
) -> dict[str, str]:
    """Nodes whose own figure is under its floor, or under ``relative`` x the median of the other nodes."""
    named: dict[str, str] = {}
    for node, value in per_node.items():
        others = [v for n, v in per_node.items() if n != node and v is not None]
        if value is None:
            named[node] = "no figure (the node's check did not complete)"
        elif floor is not None and value < floor:
            named[node] = f"{value:.2f} under the floor {floor:.2f}"
        elif others and value < relative * statistics.median(others):
            named[node] = f"{value:.2f} under {relative:g} x the other nodes' median {statistics.median(others):.2f}"
    return named
