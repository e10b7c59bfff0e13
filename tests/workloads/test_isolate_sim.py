"""The bad-node search over 1,024 simulated nodes: planted slow or hung nodes and one bad link
between two good nodes; the search must name exactly the culprits, in few rounds.

Pure simulation of the search (workloads/validate/isolate.py), no torch processes: a pair's figure
is the catalog's expected pair busbw scaled by the slower of its two nodes and its link, or None
when a planted node hangs (the pair's own timeout expired)."""

from __future__ import annotations

import random

import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.workloads.validate import isolate

N = 1024
NODES = [f"n{i:04d}" for i in range(N)]


def _simulate(
    bad: set[str], hung: set[str], bad_link: frozenset[str] | None, pairing: str
) -> tuple[isolate.Isolation, list[list[isolate.Pair]]]:
    bw = load_catalog().get("p5.48xlarge").bandwidth
    e = bw.expected(bw.op, 2, "pair")
    assert e.expected_gbps is not None and e.floor_fail_gbps is not None
    expected = e.expected_gbps
    jitter = random.Random(7)
    calls: list[list[isolate.Pair]] = []

    def measure(pairs: list[isolate.Pair]) -> dict[isolate.Pair, float | None]:
        calls.append(list(pairs))
        out: dict[isolate.Pair, float | None] = {}
        for a, b in pairs:
            if {a, b} & hung:
                out[(a, b)] = None
                continue
            speed = min(0.5 if a in bad else 1.0, 0.5 if b in bad else 1.0)
            if bad_link is not None and frozenset((a, b)) == bad_link:
                speed = min(speed, 0.3)
            out[(a, b)] = expected * speed * jitter.uniform(0.95, 1.0)  # healthy pairs vary by up to 5 %
        return out

    res = isolate.isolate(isolate.order(NODES, pairing, seed=17), measure, e.floor_fail_gbps)
    return res, calls


@pytest.mark.parametrize("pairing", ["topology", "random"])
def test_search_names_exactly_the_planted_culprits(pairing: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for planted in (0, 1, 3, 10):
        rng = random.Random(planted)
        culprits = set(rng.sample(NODES, planted))
        hung = set(sorted(culprits)[: planted // 3])  # a third of them hang instead of running slow
        slow = culprits - hung
        # The bad link joins two good nodes that the first round pairs (a search only finds links it tests).
        first = isolate.first_pass_rounds(isolate.order(NODES, pairing, seed=17))[0]
        link_pair = next(p for p in first if not set(p) & culprits)
        res, calls = _simulate(slow, hung, frozenset(link_pair), pairing)
        assert set(res.bad) == culprits, (planted, sorted(res.bad), sorted(culprits))
        assert set(res.bad_links) == {link_pair}
        assert not res.unresolved
        for rnd in calls:  # every round is disjoint pairs, so it runs at once
            members = [n for p in rnd for n in p]
            assert len(members) == len(set(members))
        assert res.rounds == len(calls) == 2  # one first-pass round of 512 pairs, one second pass
        rows.append((planted, len(hung), res.rounds, sum(len(c) for c in calls), len(res.bad), len(res.bad_links)))
    with capsys.disabled():
        print(f"\n1,024 nodes, {pairing} pairing: planted bad (hung) | rounds | pair tests | named nodes | named links")
        for planted, h, rounds, tests, named, links in rows:
            print(f"  {planted:>3} ({h}) | {rounds} | {tests:>4} | {named:>3} | {links}")


def test_a_healthy_cluster_runs_one_round_and_names_nobody() -> None:
    res, calls = _simulate(set(), set(), None, "topology")
    assert not res.bad and not res.bad_links and res.rounds == 1 and len(calls[0]) == N // 2
