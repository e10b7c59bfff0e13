"""What the engine asks of a scheduler, a cloud and a revalidation: the three seams every platform
fills in (:mod:`.slurm`, :mod:`.kubernetes`, :mod:`.aws`, :mod:`.gcp`, :mod:`.azure`, :mod:`.local`).

Every method that reads answers from the real system, never from the journal: the engine calls a
read before each step and acts only on what it found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Protocol


class AdapterError(RuntimeError):
    """A scheduler or cloud call failed (unreachable, refused, an answer that cannot be read); the
    message says which call and what came back. Inside a step it stops the incident (RETRY, resumed
    where it stopped); before the first step it is exit 3."""


class MissingSdk(AdapterError):
    """The cloud's Python client is not installed: one line naming the extra that has it."""

    def __init__(self, module: str, extra: str = "preflight") -> None:
        super().__init__(
            f"{module} is not installed here; it is gpu-cluster's [{extra}] extra: pip install 'gpu-cluster[{extra}]'"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """A node as its scheduler sees it now."""

    node: str
    present: bool
    ready: bool = False
    """Registered and answering: Kubernetes Ready, Slurm not DOWN/NOT_RESPONDING/powering."""
    in_service: bool = False
    """Takes new work: not drained (Slurm), not cordoned (Kubernetes)."""
    held_by: str | None = None
    """The incident our own quarantine mark names (drain reason, taint value), None when none is ours."""
    instance: str = ""
    """The cloud instance behind the node now, where the scheduler tells it ('' unknown)."""
    address: str = ""
    """Where the scheduler reaches it (Slurm's NodeAddr): how a cloud finds a Slurm node's instance."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes: the node's labels (its pool, GKE's report-and-replace status)."""
    unvalidated: bool = False
    """Kubernetes: the node carries its pool's registration taint (components/contract.py
    UNVALIDATED_TAINT_KEY), which only a passed check removes."""
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    ok: bool
    detail: str
    pending: bool = False
    """Not finished, not failed: ask again (pods still evicting, an operation running)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    id: str
    state: str = ""
    window_end: float | None = None
    """When the reservation or capacity block the instance runs in ends (epoch seconds), if it does."""
    window: str = ""
    """Which reservation or block, for the message."""
    capacity_block: bool = False
    """The instance runs in an EC2 capacity block (ReservationType capacity-block)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A replacement's state, re-read from the cloud."""

    started: bool
    """The cloud has it: the old instance is going or gone, or the operation is known."""
    new_instance: str = ""
    node: str = ""
    """The node name the new instance registers as, where the cloud knows it (GKE keeps the VM's
    name, an AKS machine is named as its node); '' leaves it to the scheduler (EKS: by providerID)."""
    failed: str = ""
    """Why the cloud says it failed ('' when it did not)."""
    escalate: str = ""
    """Why a person must take it from here, and what to watch: the cloud's own repair failed, or
    runs past what its documentation says it takes (GKE's faulty-host repair: days). Not retried."""
    detail: str = ""


class Scheduler(Protocol):
    kind: str

    def node(self, name: str) -> NodeState: ...

    def quarantine(self, name: str, incident: str, why: str) -> Outcome:
        """Take the node out of service with the incident in the mark. Idempotent; ``pending``
        while pods are still being evicted (call again)."""
        ...

    def release(self, name: str, incident: str) -> Outcome:
        """Return the node to service, only if our mark for ``incident`` is the one on it."""
        ...

    def successor(self, slot_node: str, old_instance: str, new_instance: str) -> str | None:
        """The node name that now stands in the slot (EKS and AKS give a replacement a new name)."""
        ...

    def open_for_check(self, name: str, peer: str, incident: str) -> Outcome:
        """Let the check's job onto a quarantined node and its peer and nothing else (Slurm: a
        reservation of the two; Kubernetes: the job tolerates our taint)."""
        ...

    def close_check(self, name: str, peer: str, incident: str) -> None: ...


class DocumentedPath:
    """A cloud adapter's expected replacement time, from its path's entry in
    gpu_cluster.components.validation_time.REPLACE_PATHS (with the source of the figure)."""

    path: str

    def replace_estimate(self) -> tuple[float, str]:
        from gpu_cluster.components.validation_time import replace_estimate

        est = replace_estimate(self.path)
        return est.seconds, est.basis


class Cloud(Protocol):
    name: str
    call: str
    """The documented call that replaces an instance, with its source (printed and journalled)."""

    def instance(self, node: NodeState) -> Instance: ...

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        """Ask the cloud for a new instance in the slot; ``token`` is the idempotency token where
        the API takes one (the same token on a rerun)."""
        ...

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        """Has the replacement started (the old instance going or gone, the operation known)?
        ``facts``: what the incident's journal holds (the group, the operation the call returned)."""
        ...

    def replace_estimate(self) -> tuple[float, str]:
        """(seconds a replacement is expected to take to register, its basis)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    ran: bool
    passed: bool
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)
    report: str = ""
    """Where the check's own report is."""
    own: bool = False
    """It FAILed the node for a finding of the node's own alone (its gate, GPU health, GPU count,
    single-node collectives): no peer is involved, so no second peer is needed to blame it (I8)."""


class Checker(Protocol):
    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        """The node gate and one pair test of ``node`` with ``peer`` (a node the report cleared);
        ``purpose`` is ``confirm`` or ``revalidate``. Passed when ``node`` has no finding of its own
        and the pair's figure is measured."""
        ...

    def estimate(self) -> tuple[float, str]:
        """(seconds the check is expected to take, its basis)."""
        ...
