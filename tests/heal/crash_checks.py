"""The check a crash suite's heal runs, as the cluster records it: every check it ran (node, peer,
purpose, verdict, and what the node looked like while it ran) appended to ``checks.jsonl`` in the
run folder, a record the test reads after the killed heal and its rerun, beside the stand-ins'
own state (never heal's journal).

Modes, one scenario each (issue 41's invariants):

- ``replace``: the bad node FAILs for a finding of its own, every other node passes;
- ``flake``: every check passes: the second look clears the node the report FAILed (I4);
- ``pair``: every check with ``pair_peer`` FAILs for the pair's reason (not the node's own), so the
  node is blamed, and its replacement passed, only with a second, different cleared peer (I8);
- ``busy``: as ``replace``, with two nodes FAILed by the report (the test puts work on the first:
  on Kubernetes :func:`put_kept_pod`).

:func:`assert_blamed_only_with_second_peer` is I8's reading of the record, the same on every
platform.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_cluster.heal.adapters import CheckResult
from gpu_cluster.heal.policy import Limits

if TYPE_CHECKING:
    from tests.kubeapi import Store

CHECKS = "checks.jsonl"


class RecordedChecks:
    def __init__(
        self,
        run_dir: Path,
        mode: str,
        is_bad: Callable[[str], bool],
        *,
        pair_peer: str = "",
        look: Callable[[str], Any] | None = None,
    ) -> None:
        self.path = run_dir / CHECKS
        self.mode, self.is_bad, self.pair_peer, self.look = mode, is_bad, pair_peer, look

    def estimate(self) -> tuple[float, str]:
        return 600.0, "test"

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        if self.mode == "flake":
            passed, own, why = True, False, "PASS"
        elif self.mode == "pair" and peer == self.pair_peer:
            passed, own, why = False, False, f"pair {node}-{peer}: busbw 0.4 of the floor"
        else:
            bad = self.is_bad(node)
            passed, own, why = not bad, bad, "gate ecc.volatile (gpu0): 3" if bad else "PASS"
        row = {"node": node, "peer": peer, "purpose": purpose, "passed": passed, "own": own}
        if self.look is not None:
            row["seen"] = self.look(node)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return CheckResult(ran=True, passed=passed, own=own, detail=f"{node} with {peer}: {why}")


def checks_run(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / CHECKS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def limits_for(mode: str) -> Limits:
    """``busy``: two nodes FAILed at once allowed, a budget of one node out of service, and an
    eviction deadline already past, so a node whose work stays ends its run at once (RETRY)."""
    if mode == "busy":
        return Limits(apply=True, max_out=1, max_unhealthy=0.7, evict_timeout_s=0.001)
    return Limits(apply=True)


def assert_blamed_only_with_second_peer(
    checks: list[dict[str, Any]], first: str, second: str, confirm: list[dict[str, Any]], reval: list[dict[str, Any]]
) -> None:
    """I8 (mode ``pair``): every check with the ``first`` cleared peer failed for the pair's reason,
    never the node's own; the node's confirmation (``confirm``, its checks) blamed it only with the
    ``second``, and its replacement's revalidation (``reval``) passed only with the ``second``."""
    for c in checks:  # a pair failure is never the node's own, and never alone the last word
        if c["peer"] == first:
            assert not c["passed"] and not c["own"]
    assert [c["peer"] for c in confirm[-2:]] == [first, second] and confirm[-1]["own"]
    assert [c["peer"] for c in reval[-2:]] == [first, second] and reval[-1]["passed"]


def put_kept_pod(store: Store, node: str) -> None:
    """A running pod ``train-0`` in ``default`` on ``node``, kept there by a PodDisruptionBudget that
    allows no disruption (mode ``busy``'s work on Kubernetes)."""
    store.create(
        store.resource("pods"),
        "default",
        {
            "metadata": {"name": "train-0", "namespace": "default", "labels": {"app": "train"}},
            "spec": {"nodeName": node, "containers": [{"name": "train", "image": "train"}]},
            "status": {"phase": "Running"},
        },
    )
    store.create(
        store.resource("poddisruptionbudgets", "policy"),
        "default",
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, "maxUnavailable": 0},
            "status": {"disruptionsAllowed": 0},
        },
    )
