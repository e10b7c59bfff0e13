"""The dry run: what heal would do with a named node, step by step, and which limit would stop it.
Nothing here acts; it reads the scheduler, the cloud and the journal as the run with ``--apply``
would before each step (split from :mod:`.engine`, which acts)."""

from __future__ import annotations

from typing import Any

from gpu_cluster.heal.policy import ATTEMPT_WINDOW_S, RATE_WINDOW_S


def explain(engine: Any, node: str, why: str, out: Any) -> None:
    """Say what an ``--apply`` run would do with the named node, and which limit would stop it; act on nothing.
    ``engine`` is the :class:`.engine.Engine` and ``out`` its Outcome (typed loosely: this module
    must not import the engine, which imports it)."""
    view = engine.sched.node(node)
    engine.say(f"dry run: {node} is named: {why}")
    if not view.present:
        engine.say(
            f"dry run:   {node} is not known to the {engine.sched.kind} scheduler ({view.detail}): would escalate"
        )
        out.stop(f"{node}: unknown to the scheduler")
        return
    peer = engine.peer_for(node)
    if not peer:
        engine.say(f"dry run:   no cleared node in service to pair {node} with: it would stop (RETRY)")
        out.stop(f"{node}: no peer")
        return
    engine.say(f"dry run:   would confirm: node gate and a pair test with {peer}")
    held = engine.j.out_of_service()
    if len(held) >= engine.limits.max_out:
        engine.say(
            f"dry run:   would stop before quarantining: heal holds {len(held)} node(s) out of service, "
            f"at most {engine.limits.max_out} (--max-out-of-service)"
        )
        out.stop(f"{node}: fleet budget")
        return
    engine.say(f"dry run:   would quarantine on {engine.sched.kind}, the incident id in the mark")
    now = engine.j.now()
    recent = engine.j.requested_since(now - RATE_WINDOW_S)
    tries = engine.j.requested_since(now - ATTEMPT_WINDOW_S, slot=engine.slot_of(node))
    inst = engine.cloud.instance(view)
    replace_s, _ = engine.cloud.replace_estimate()
    check_s, _ = engine.checker.estimate()
    ends = [t for t in (inst.window_end, engine.limits.window_end) if t is not None]
    if len(tries) >= engine.limits.max_attempts:
        engine.say(f"dry run:   would escalate: {len(tries)} replacements of the slot in 24 h")
        out.stop(f"{node}: attempts")
    elif len(recent) >= engine.limits.max_per_hour:
        engine.say(
            f"dry run:   would stop before replacing: {len(recent)} replacement(s) in the last hour, "
            f"at most {engine.limits.max_per_hour} (--max-per-hour)"
        )
        out.stop(f"{node}: rate limit")
    elif ends and min(ends) - now < replace_s + check_s:
        engine.say(f"dry run:   would abandon: the capacity window ends in {(min(ends) - now) / 60:.0f} min")
        out.stop(f"{node}: window")
    else:
        engine.say(f"dry run:   would replace {inst.id or node}: {engine.cloud.call}")
        engine.say(
            f"dry run:   would wait up to {engine.limits.join_timeout_s / 60:.0f} min for it to register, "
            f"revalidate it with {peer}, and return it only if both pass"
        )
