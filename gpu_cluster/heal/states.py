"""The states of a node slot and the moves between them.

A slot is what persists while its instance changes: the Slurm node name (PCS, Cluster Director
keep it across a replacement), the GKE node name (auto-repair and report-and-replace keep it,
SELFHEAL.md G1/G2), or, where a replacement brings a node of another name (EKS managed node
groups, AKS), the name the first incident found; the journal carries the node's current name
beside it.
"""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    HEALTHY = "HEALTHY"
    SUSPECT = "SUSPECT"
    """The report FAILed the node for a reason of its own (gate, health, pair search)."""
    CONFIRMED = "CONFIRMED"
    """A second look (node gate and a pair test with a node the report cleared) failed it again."""
    QUARANTINED = "QUARANTINED"
    """Out of service: Slurm drained, or Kubernetes cordoned, tainted and emptied."""
    REPLACING = "REPLACING"
    """The cloud was asked for a new instance in the slot (the call and its token are journalled)."""
    JOINING = "JOINING"
    """Waiting for the new instance to register: Ready (Kubernetes) or responding (Slurm)."""
    REVALIDATING = "REVALIDATING"
    """The node gate and one pair test with a cleared node, on the new instance."""
    RETRY = "RETRY"
    """Stopped by a limit or a failed step; the next run continues from here."""
    ESCALATED = "ESCALATED"
    """A person must act: attempts used up, or the cloud refused."""
    ABANDONED = "ABANDONED"
    """The reservation or capacity block ends before a replacement could be revalidated."""

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.HEALTHY, State.ESCALATED, State.ABANDONED})

# Where each state may go next. HEALTHY out of SUSPECT: the second look passed, nothing is done.
MOVES: dict[State, frozenset[State]] = {
    State.HEALTHY: frozenset({State.SUSPECT}),
    State.SUSPECT: frozenset({State.CONFIRMED, State.HEALTHY, State.RETRY, State.ESCALATED}),
    State.CONFIRMED: frozenset({State.QUARANTINED, State.RETRY, State.ESCALATED}),
    State.QUARANTINED: frozenset({State.REPLACING, State.RETRY, State.ESCALATED, State.ABANDONED}),
    State.REPLACING: frozenset({State.JOINING, State.RETRY, State.ESCALATED}),
    State.JOINING: frozenset({State.REVALIDATING, State.RETRY, State.ESCALATED}),
    State.REVALIDATING: frozenset({State.HEALTHY, State.RETRY, State.ESCALATED}),
    # A retry resumes where it stopped: the second look, the quarantine, a replacement, the wait for
    # the new instance, or its revalidation.
    State.RETRY: frozenset(
        {
            State.SUSPECT,
            State.CONFIRMED,
            State.QUARANTINED,
            State.JOINING,
            State.REVALIDATING,
            State.ESCALATED,
            State.ABANDONED,
        }
    ),
    State.ESCALATED: frozenset(),
    State.ABANDONED: frozenset(),
}


class BadMove(RuntimeError):
    """A move the machine does not allow: a bug, never a user error."""


def check_move(old: State | None, new: State) -> None:
    if old is None:
        if new is not State.SUSPECT:
            raise BadMove(f"an incident starts SUSPECT, not {new.value}")
        return
    if old is new:
        return  # progress inside a state (REPLACING: intent, then requested)
    if new not in MOVES[old]:
        raise BadMove(f"{old.value} -> {new.value} is not a move of the heal state machine")
