"""The heal loop: one incident at a time, each step re-reading the real state before it acts and
journalling before and after.

Order of a run: the stop-all check over the report; the incidents the journal left open (an
earlier run was killed or stopped by a limit); then the report's named nodes that have no
incident for this report yet. Each incident is taken as far as it goes before the next starts
(one replacement at a time). Without ``apply`` nothing acts: each step says what it would do,
including which limit would stop it.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_cluster.heal.adapters import AdapterError, Checker, Cloud, Scheduler
from gpu_cluster.heal.dry_run import explain
from gpu_cluster.heal.evidence import Evidence
from gpu_cluster.heal.journal import Entry, Incident, Journal
from gpu_cluster.heal.policy import ATTEMPT_WINDOW_S, RATE_WINDOW_S, Limits, stop_all_reason
from gpu_cluster.heal.states import State

EXIT_OK, EXIT_STOPPED, EXIT_COULD_NOT_RUN = 0, 2, 3
POLL_S = 15.0


@dataclass(slots=True)
class Outcome:
    code: int = EXIT_OK
    lines: list[str] = field(default_factory=list)
    healed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)

    def stop(self, why: str) -> None:
        self.code = max(self.code, EXIT_STOPPED)
        self.stopped.append(why)


class Stop(Exception):
    """This incident goes no further in this run (a limit, a failed step, a dry run's end)."""


def incident_id(cluster: str, slot: str, report_id: str) -> str:
    """Short enough for a Kubernetes taint value (63) and a Slurm reason, stable across reruns."""
    return "h-" + hashlib.sha256(f"{cluster}|{slot}|{report_id}".encode()).hexdigest()[:10]


def request_uuid(token: str) -> str:
    """The idempotency token as a UUID, for APIs that want one (Compute Engine's requestId)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-cluster-heal:{token}"))


class Engine:
    def __init__(
        self,
        *,
        cluster: str,
        journal: Journal,
        scheduler: Scheduler,
        cloud: Cloud,
        checker: Checker,
        limits: Limits,
        say: Callable[[str], None] = print,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = POLL_S,
        guard: Callable[[], str] = lambda: "",
    ) -> None:
        self.cluster = cluster
        self.j = journal
        self.sched = scheduler
        self.cloud = cloud
        self.checker = checker
        self.limits = limits
        self.say = say
        self.sleep = sleep
        self.poll_s = poll_s
        self.guard = guard
        """Why this heal no longer holds the cluster's lock ('' while it does, I9)."""
        self.evidence: Evidence | None = None

    # ---- the run ---------------------------------------------------------------------------

    def run(self, ev: Evidence) -> Outcome:
        self.evidence = ev
        out = Outcome()
        for note in self.j.notes:
            self.say(f"journal: {note}")
        stop = stop_all_reason(ev.failed, len(ev.nodes), self.limits)
        if stop:
            self.say(f"heal: stopped before any step: {stop}")
            out.stop(stop)
            return out
        for f in ev.not_acted_on:
            self.say(f"heal: {f.node} {f.verdict}, not acted on (not a finding of the node's own): {f.why}")
        work: list[Incident | tuple[str, str, str]] = list(self.j.open_incidents())
        busy = {i.slot for i in work if isinstance(i, Incident)}
        for f in ev.named:
            slot = self.slot_of(f.node)
            inc_id = incident_id(self.cluster, slot, ev.report_id)
            done = self.j.incident(inc_id)
            if done is not None and done.state.terminal:
                self.say(f"heal: {f.node}: incident {inc_id} from this report already ended {done.state.value}")
                continue
            if slot in busy:
                continue  # its open incident is continued above
            work.append((f.node, slot, f.why))
            busy.add(slot)
        if not work and not ev.named:
            self.say("heal: nothing to do: the report names no node for a finding of its own")
        for item in work:
            if isinstance(item, Incident):
                inc = item
                if not self.limits.apply:
                    self.say(
                        f"dry run: incident {inc.incident} ({inc.node}) is open at {inc.state.value}: "
                        "--apply continues it from there"
                    )
                    continue
                self.say(f"heal: continuing incident {inc.incident} ({inc.node}, {inc.state.value}) from the journal")
            else:
                node, slot, why = item
                if not self.limits.apply:
                    explain(self, node, why, out)
                    continue
                inc = self._open(node, slot, why, ev)
            try:
                self.advance(inc)
            except Stop as s:
                out.stop(f"{inc.node}: {s}")
                cur = self.j.incident(inc.incident)
                if cur is not None and in_flight(cur):
                    # One at a time: no other replacement starts while this one is unfinished.
                    rest = [w.node if isinstance(w, Incident) else w[0] for w in work[work.index(item) + 1 :]]
                    if rest:
                        out.stop(f"{', '.join(rest)}: waiting; {cur.node}'s replacement is still in flight (rerun)")
                    break
                continue
            final = self.j.incident(inc.incident)
            assert final is not None
            if final.state is State.HEALTHY:
                out.healed.append(final.node)
            else:
                out.stop(f"{final.node}: {final.state.value}: {final.last.detail}")
        return out

    def slot_of(self, node: str) -> str:
        """A node that replaced another stands in that node's slot."""
        for inc in reversed(self.j.incidents()):
            if inc.node == node:
                return inc.slot
        return node

    def _open(self, node: str, slot: str, why: str, ev: Evidence) -> Incident:
        inc = incident_id(self.cluster, slot, ev.report_id)
        view = self.sched.node(node)
        self._write(
            inc,
            slot,
            node,
            State.SUSPECT,
            f"the report FAILed it: {why}",
            instance=view.instance,
            extra={"report": str(ev.path), "report_id": ev.report_id, "why": why},
        )
        got = self.j.incident(inc)
        assert got is not None
        return got

    # ---- one incident ----------------------------------------------------------------------

    def advance(self, inc: Incident) -> None:
        steps: dict[State, Callable[[Incident], None]] = {
            State.SUSPECT: self._confirm,
            State.CONFIRMED: self._quarantine,
            State.QUARANTINED: self._start_replacement,
            State.REPLACING: self._replace,
            State.JOINING: self._join,
            State.REVALIDATING: self._revalidate,
            State.RETRY: self._resume,
        }
        while True:
            cur = self.j.incident(inc.incident)
            assert cur is not None
            if cur.state.terminal:
                return
            lost = self.guard()
            if lost:
                raise Stop(f"no step taken: this heal no longer holds the cluster ({lost}); rerun")
            try:
                steps[cur.state](cur)
            except AdapterError as exc:
                at = State(cur.fact("resume", State.QUARANTINED.value)) if cur.state is State.RETRY else cur.state
                self._retry(cur, at, f"{at.value}: {exc}"[:600])

    def _write(
        self,
        incident: str,
        slot: str,
        node: str,
        state: State,
        detail: str,
        *,
        event: str = "enter",
        instance: str = "",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.j.append(
            Entry(
                at=self.j.now(),
                cluster=self.cluster,
                slot=slot,
                node=node,
                incident=incident,
                state=state,
                event=event,
                detail=detail,
                instance=instance,
                extra=extra or {},
            )
        )

    def _move(self, inc: Incident, state: State, detail: str, **kw: Any) -> None:
        kw.setdefault("instance", inc.instance)
        self._write(inc.incident, inc.slot, kw.pop("node", inc.node), state, detail, **kw)

    def _retry(self, inc: Incident, resume: State, detail: str, *, stop: bool = True) -> None:
        self._move(inc, State.RETRY, detail, extra={"resume": resume.value})
        if stop:
            raise Stop(detail)

    def _resume(self, inc: Incident) -> None:
        resume = State(inc.fact("resume", State.QUARANTINED.value))
        self._move(inc, resume, f"resumed after: {inc.last.detail}"[:400])

    def peer_for(self, node: str, besides: frozenset[str] = frozenset()) -> str:
        """A node the last report cleared, in service now, and in no open incident."""
        ev = self.evidence
        held = {i.node for i in self.j.open_incidents()} | {node} | besides
        for cand in ev.cleared if ev else ():
            if cand in held:
                continue
            view = self.sched.node(cand)
            if view.present and view.ready and view.in_service:
                return cand
        return ""

    def _check(self, inc: Incident, node: str, purpose: str, besides: frozenset[str] = frozenset()) -> tuple[str, Any]:
        peer = self.peer_for(node, besides)
        if not peer:
            self._retry(
                inc,
                inc.state,
                f"no {'other ' if besides else ''}node the report cleared is in service to pair with for the "
                f"{purpose} check{' (a second, different peer before blaming it: I8)' if besides else ''}: "
                "return one to service, or validate again, then rerun",
            )
        opened = self.sched.open_for_check(node, peer, inc.incident)
        if not opened.ok:
            self._retry(inc, inc.state, f"could not open {node} and {peer} to the check's job: {opened.detail}")
        try:
            result = self.checker.check(node, peer, inc.incident, purpose)
        finally:
            self.sched.close_check(node, peer, inc.incident)
        return peer, result

    def _look(self, inc: Incident, purpose: str, at: State, what: str) -> tuple[str, Any]:
        """A check of the incident's node with a cleared peer; one that FAILs it for a reason a peer
        or its link shares (the pair's figure, a rank that died) is repeated with a second,
        different cleared peer, and the node is blamed only if that fails it too (I8)."""
        peer, r = self._check(inc, inc.node, purpose)
        if not r.ran:
            self._retry(inc, at, f"{what} could not run: {r.detail}")
        if r.passed or r.own:
            return peer, r
        first, first_detail = peer, r.detail
        peer, r = self._check(inc, inc.node, "re" + purpose, frozenset({first}))
        if not r.ran:
            self._retry(inc, at, f"{what} with a second peer could not run: {r.detail}")
        if r.passed:
            return peer, replace(
                r,
                detail=f"it failed with {first} ({first_detail}) but passed with {peer}: the pair "
                f"or {first} is suspect, not {inc.node}: {r.detail}",
            )
        return peer, replace(r, detail=f"with {first}: {first_detail}; and with {peer}: {r.detail}")

    def _confirm(self, inc: Incident) -> None:
        # No shortcut on our own mark (I1): the quarantine is only ever made after the CONFIRMED
        # line, so a mark found while SUSPECT is the check's own (Slurm drains the node again when
        # its check ends, slurm.py close_check), never evidence that a check FAILed it.
        view = self.sched.node(inc.node)
        if not view.present:
            self._move(
                inc, State.ESCALATED, f"{inc.node} is not known to the {self.sched.kind} scheduler: {view.detail}"
            )
            return
        # I7, before the second look (on Slurm the check leaves the node drained): a node is taken
        # out of service only while heal holds fewer than --max-out-of-service nodes out.
        held = [i for i in self.j.out_of_service() if i.incident != inc.incident]
        if len(held) >= self.limits.max_out:
            self._retry(
                inc,
                State.SUSPECT,
                f"fleet budget: heal holds {len(held)} node(s) out of service "
                f"({', '.join(f'{i.node} {i.state.value}' for i in held[:5])}), at most {self.limits.max_out} "
                "(--max-out-of-service); it stays in service, unchecked, until one returns",
            )
        peer, r = self._look(inc, "confirm", State.SUSPECT, "the second look")
        if r.passed:
            back = self._return_to_service(inc, inc.node)
            self._move(
                inc,
                State.HEALTHY,
                f"cleared by the second look with {peer} (nothing replaced); {back}: {r.detail}",
                extra={"peer": peer, "figures": r.figures, "check_report": r.report, "outcome": "cleared"},
            )
            return
        self._move(
            inc,
            State.CONFIRMED,
            f"the second look with {peer} failed it again: {r.detail}",
            extra={"peer": peer, "confirm_report": r.report},
        )

    def _return_to_service(self, inc: Incident, node: str) -> str:
        """Lift our own mark from a node a check cleared and read it back (I4); a mark that is
        not ours is left alone and said so. Raises AdapterError (RETRY) when the read-back shows
        it still out of service."""
        view = self.sched.node(node)
        if view.held_by is None and view.unvalidated:
            # No mark of ours, but the pool's registration taint, which the check that FAILed the
            # node left on: this passed check is what removes it (as `validate submit` does).
            res = self.sched.release(node, inc.incident)
            after = self.sched.node(node)
            if not res.ok or after.unvalidated:
                raise AdapterError(f"cleared, but {node} still carries its registration taint: {res.detail}")
            if after.in_service:
                return f"its registration taint removed, back in service (read back: {after.detail})"
            return (
                f"its registration taint removed; still out of service by a mark not this incident's ({after.detail})"
            )
        if view.held_by != inc.incident:
            if view.in_service:
                return "in service (read back)"
            return f"left as it is, its mark is not this incident's ({view.detail})"
        res = self.sched.release(node, inc.incident)
        after = self.sched.node(node)
        if not res.ok or not after.in_service:
            raise AdapterError(f"cleared, but {node} is still out of service after the release: {res.detail}")
        return f"back in service (read back: {after.detail})"

    def _quarantine(self, inc: Incident) -> None:
        # Our mark on the node is never taken as "empty" (I5): the quarantine is asked again (it is
        # idempotent) and says whether work is still on the node.
        if not inc.has(State.CONFIRMED, "intent"):
            self._move(inc, State.CONFIRMED, f"taking {inc.node} out of service", event="intent")
            cur = self.j.incident(inc.incident)
            assert cur is not None
            inc = cur
        why = str(inc.fact("why", ""))
        # The deadline runs from the first time heal took the node out of service, across reruns.
        first = min(e.at for e in inc.entries if e.state is State.CONFIRMED and e.event == "intent")
        deadline = first + self.limits.evict_timeout_s
        while True:
            res = self.sched.quarantine(inc.node, inc.incident, why)
            if res.ok:
                self._move(inc, State.QUARANTINED, res.detail)
                return
            if not res.pending:
                self._retry(inc, State.CONFIRMED, f"could not take {inc.node} out of service: {res.detail}")
            if self.j.now() >= deadline:
                if self.limits.replace_busy:
                    self._move(
                        inc,
                        State.QUARANTINED,
                        f"still busy after {self.limits.evict_timeout_s:.0f} s, replaced anyway as "
                        f"--replace-busy asks: {res.detail}",
                        extra={"replaced_busy": True},
                    )
                    return
                self._retry(
                    inc,
                    State.CONFIRMED,
                    f"out of service but not empty after {self.limits.evict_timeout_s:.0f} s: {res.detail} "
                    "(work is never killed: pods are not deleted past their PodDisruptionBudget, Slurm jobs are "
                    "not cancelled; let it end or move it, then rerun, or rerun with --replace-busy)",
                )
            self.sleep(self.poll_s)

    def _start_replacement(self, inc: Incident) -> None:
        now = self.j.now()
        tries = self.j.requested_since(now - ATTEMPT_WINDOW_S, slot=inc.slot)
        if len(tries) >= self.limits.max_attempts:
            self._move(
                inc,
                State.ESCALATED,
                f"{len(tries)} replacements of slot {inc.slot} in 24 h without a healthy return: a person must look "
                f"(the host, the image, the reservation); it stays out of service",
            )
            return
        recent = self.j.requested_since(now - RATE_WINDOW_S)
        if len(recent) >= self.limits.max_per_hour:
            nxt = min(e.at for e in recent) + RATE_WINDOW_S if recent else now
            self._retry(
                inc,
                State.QUARANTINED,
                f"rate limit: {len(recent)} replacement(s) in the last hour, at most {self.limits.max_per_hour} "
                f"(--max-per-hour); it stays out of service"
                + (
                    f"; rerun after {time.strftime('%H:%M:%S', time.gmtime(nxt))} UTC"
                    if self.limits.max_per_hour
                    else ""
                ),
            )
        view = self.sched.node(inc.node)
        old = self.cloud.instance(view)
        replace_s, replace_basis = self.cloud.replace_estimate()
        check_s, check_basis = self.checker.estimate()
        ends = [t for t in (old.window_end, self.limits.window_end) if t is not None]
        if ends:
            left = min(ends) - now
            need = replace_s + check_s
            if left < need:
                self._move(
                    inc,
                    State.ABANDONED,
                    f"the capacity window {old.window or '(--window-end)'} ends in {max(left, 0) / 60:.0f} min, "
                    f"before a replacement ({replace_s / 60:.0f} min: {replace_basis}) and its revalidation "
                    f"({check_s / 60:.0f} min: {check_basis}) could finish; it stays out of service",
                    instance=old.id,
                )
                return
        held = self._hold_slot(inc)
        attempt = len(self.j.requested_since(0.0, slot=inc.slot)) + 1
        token = f"{inc.incident}-a{attempt}"
        # What the pool looks like before the call (its size, its members), journalled with the
        # intent: a rerun killed after the call and before its line tells this call's replacement
        # from the pool's other members, and restores the size, from these facts (I2, I3).
        prepare = getattr(self.cloud, "prepare", None)
        before = dict(prepare(view, old)) if prepare is not None else {}
        self._move(
            inc,
            State.REPLACING,
            f"asking for a new instance in place of {old.id or inc.node}: {self.cloud.call}{held}",
            event="intent",
            instance=old.id,
            extra={
                **before,
                "token": token,
                "old_instance": old.id,
                "attempt": attempt,
                "call": self.cloud.call,
                "asked_at": now,
            },
        )

    def _hold_slot(self, inc: Incident) -> str:
        """I6 where the replacement comes back under the slot's name (PCS, Cluster Director: the
        cloud says ``keeps_name``): the scheduler holds the slot out of user work before the cloud
        is asked, across the relaunch, until the release after a passed revalidation (Slurm: the
        ``<incident>-slot`` maintenance reservation, gpu_cluster/heal/slurm.py). Idempotent; a hold
        that cannot be made stops the incident before the call (RETRY), so no replacement is ever
        asked for without it."""
        hold = getattr(self.sched, "hold", None)
        if hold is None or not getattr(self.cloud, "keeps_name", False):
            return ""
        res = hold(inc.node, inc.incident)
        if not res.ok:
            raise AdapterError(f"could not hold {inc.node} out of work across the relaunch: {res.detail}")
        return f"; {res.detail}"

    def _replace(self, inc: Incident) -> None:
        token = str(inc.fact("token", ""))
        old = str(inc.fact("old_instance", ""))
        view = self.sched.node(inc.node)
        if inc.last.event == "done":
            self._move(inc, State.JOINING, "waiting for the new instance to register")
            return
        prog = self.cloud.progress(view, old, token, facts(inc))
        if prog.escalate:
            self._move(inc, State.ESCALATED, prog.escalate)
            return
        if prog.failed:
            self._retry(inc, State.QUARANTINED, f"the cloud did not replace it: {prog.failed}", stop=False)
            return
        if prog.started:
            # Killed after the call and before its journal line: the cloud already has it.
            self._move(
                inc, State.REPLACING, f"already under way on re-read: {prog.detail}", event="done", extra={"op": ""}
            )
            return
        self._hold_slot(inc)  # a rerun from the intent line: the hold is asked again before the call
        instance = self.cloud.instance(view)
        res = self.cloud.replace(view, instance, token, str(inc.fact("why", "")))
        if not res.ok:
            self._move(inc, State.ESCALATED, f"the cloud refused the replacement: {res.detail}")
            return
        self._move(inc, State.REPLACING, res.detail, event="done", extra=dict(res.extra))

    def _join(self, inc: Incident) -> None:
        old = str(inc.fact("old_instance", ""))
        started = max(e.at for e in inc.entries if e.state is State.JOINING and e.event == "enter")
        deadline = started + self.limits.join_timeout_s
        while True:
            self._restore_size(inc)
            prog = self.cloud.progress(self.sched.node(inc.node), old, str(inc.fact("token", "")), facts(inc))
            new = prog.new_instance
            # The node that stands in the slot now: the same name (Slurm, GKE, local), or the node
            # whose instance is the new one (EKS, AKS); None until it has registered.
            name = (prog.node or self.sched.successor(inc.node, old, new)) if new and new != old else None
            view = self.sched.node(name) if name else None
            if view is not None and name and view.present and view.ready:
                if view.held_by != inc.incident:
                    # A node of a new name (EKS, AKS), or one whose mark the replacement cleared,
                    # joins in service: out of it until revalidated.
                    self.sched.quarantine(name, inc.incident, f"replacement of {inc.node}, not yet revalidated")
                    view = self.sched.node(name)
                self._move(
                    inc,
                    State.REVALIDATING,
                    f"{name} registered on {new}: {view.detail}",
                    node=name,
                    instance=new,
                    extra={"new_instance": new},
                )
                return
            if prog.escalate:
                self._move(inc, State.ESCALATED, prog.escalate)
                return
            if prog.failed:
                self._retry(inc, State.QUARANTINED, f"the replacement failed: {prog.failed}", stop=False)
                return
            if self.j.now() >= deadline:
                self._retry(
                    inc,
                    State.JOINING,
                    f"no new instance registered within {self.limits.join_timeout_s / 60:.0f} min "
                    f"({view.detail if view is not None else prog.detail}); rerun to keep waiting",
                )
            self.sleep(self.poll_s)

    def _restore_size(self, inc: Incident) -> None:
        """I3: a pool the call left short (AKS deleteMachines lowers the count) is scaled back to the
        size journalled before the call, as its own intent and done lines; re-read each time, so a
        rerun after a kill on either side of the call asks again only while it is still short."""
        short_of = getattr(self.cloud, "short_of", None)
        if short_of is None:
            return
        cur = self.j.incident(inc.incident)
        assert cur is not None
        known = facts(cur)
        view = self.sched.node(cur.node)
        why = short_of(view, known)
        if not why:
            # Killed after the restore landed and before its line: the pool read back at its size
            # closes the intent, so no restore is left open in the journal.
            if cur.last.event == "restore-intent":
                self._move(
                    cur,
                    cur.state,
                    "read back: the pool is not short of the size journalled before the call; the restore asked "
                    "before this run was cut needs no second call (a shortfall found later is restored anew)",
                    event="restored",
                )
            return
        if cur.last.event != "restore-intent":  # a kill after the intent and before the call: asked once more
            self._move(cur, cur.state, f"restoring the pool's size: {why}", event="restore-intent")
        res = self.cloud.restore(view, known)  # type: ignore[attr-defined]
        self._move(cur, cur.state, res.detail, event="restored")

    def _revalidate(self, inc: Incident) -> None:
        view = self.sched.node(inc.node)
        passed = _since_attempt(inc, State.REVALIDATING, "passed")
        if view.present and view.in_service and view.held_by is None and passed:
            self._move(inc, State.HEALTHY, f"found returned to service on re-read{self._settle(inc)}")
            return
        if not passed:
            peer, r = self._look(inc, "revalidate", State.REVALIDATING, "the revalidation")
            if not r.passed:
                self._retry(
                    inc,
                    State.QUARANTINED,
                    f"the replacement failed its revalidation with {peer}: {r.detail}",
                    stop=False,
                )
                return
            self._move(
                inc,
                State.REVALIDATING,
                f"node gate and pair test with {peer} passed: {r.detail}",
                event="passed",
                extra={"peer": peer, "figures": r.figures, "check_report": r.report},
            )
            cur = self.j.incident(inc.incident)
            assert cur is not None
            inc = cur
        res = self.sched.release(inc.node, inc.incident)
        if not res.ok:
            self._retry(inc, State.REVALIDATING, f"passed, but could not be returned to service: {res.detail}")
        self._move(
            inc,
            State.HEALTHY,
            f"returned to service: {res.detail}{self._settle(inc)}",
            extra={"outcome": "replaced", "replaced": str(inc.fact("old_instance", ""))},
        )

    def _settle(self, inc: Incident) -> str:
        """What the cloud tidies once the node is back (GKE: the report's labels, I10), before HEALTHY."""
        settle = getattr(self.cloud, "settle", None)
        said = settle(self.sched.node(inc.node), facts(inc)) if settle is not None else ""
        return f"; {said}" if said else ""


def in_flight(inc: Incident) -> bool:
    """A replacement asked for and not yet revalidated or given up on."""
    at = State(inc.fact("resume", inc.state.value)) if inc.state is State.RETRY else inc.state
    return at in (State.REPLACING, State.JOINING, State.REVALIDATING)


def facts(inc: Incident) -> dict[str, Any]:
    """Every ``extra`` of the incident's journal, later lines winning."""
    out: dict[str, Any] = {}
    for e in inc.entries:
        out.update(e.extra)
    return out


def _since_attempt(inc: Incident, state: State, event: str) -> bool:
    """Whether ``state/event`` was journalled for the current attempt (after the last replacement
    was asked for), so that an earlier attempt's line never stands for this one."""
    starts = [k for k, e in enumerate(inc.entries) if e.state is State.REPLACING and e.event == "intent"]
    first = starts[-1] if starts else 0
    return any(e.state is state and e.event == event for e in inc.entries[first:])
