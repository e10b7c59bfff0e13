"""The capacity the nodes launch into: a reservation or capacity block, and the placement group."""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import ClientError

from gpu_cluster.components.preflight import Context, CouldNotCheck, NotApplicable, Problem
from gpu_cluster.components.preflight.aws.clients import call, when


# Reservation states a launch can use now or later (EC2 API CapacityReservation.State; the enum
# in botocore's ec2 2016-11-15 model: active, scheduled, expired, cancelled, pending, failed, ...).
USABLE_STATES = ("active", "scheduled")


def _reservation(ctx: Context) -> dict[str, Any] | None:
    """The stack's capacity reservation (ODCR or capacity block) as EC2 describes it, or None."""
    cid = ctx.spec.compute.capacity.id

    def fetch() -> dict[str, Any] | None:
        try:
            resp = call(
                "ec2:DescribeCapacityReservations",
                ctx.clients.ec2.describe_capacity_reservations,
                CapacityReservationIds=[cid],
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "").startswith("InvalidCapacityReservationId"):
                return None
            raise CouldNotCheck(f"ec2:DescribeCapacityReservations: {exc}") from None
        found = resp.get("CapacityReservations", [])
        return found[0] if found else None

    result: dict[str, Any] | None = ctx.cached("reservation", fetch)
    return result


def _zone_id_of(ctx: Context, zone: str) -> str | None:
    """The zone's ID from the zone check's answer when it ran (None otherwise: no second call)."""
    zones = ctx.cache.get("zones")
    return zones.get(zone) if isinstance(zones, dict) else None


def check_capacity(ctx: Context, now: dt.datetime | None = None) -> list[Problem]:
    """The reservation or block exists, is active or scheduled, and matches the stack's type,
    zone and node count; when it starts and ends goes in the notes."""
    spec = ctx.spec
    cap = spec.compute.capacity
    if not cap.pre_placed:
        raise NotApplicable(f"{cap.type} capacity")
    now = now or dt.datetime.now(dt.timezone.utc)
    cr = _reservation(ctx)
    kind = "capacity block" if cap.type == "capacity-block" else "capacity reservation"
    if cr is None:
        return [
            Problem(
                "compute.capacity.id",
                f"{cap.id} is no {kind} this account can see in {spec.region} "
                "(allowed: an id from `aws ec2 describe-capacity-reservations`)",
            )
        ]
    problems: list[Problem] = []
    rtype = cr.get("ReservationType", "default")
    want = "capacity-block" if cap.type == "capacity-block" else "default"
    if rtype != want:
        problems.append(
            Problem(
                "compute.capacity.type",
                f"{cap.id} is a {'capacity block' if rtype == 'capacity-block' else 'capacity reservation (ODCR)'}, "
                f"not a {kind} (allowed: {'capacity-block' if rtype == 'capacity-block' else 'reservation'})",
            )
        )
    state = cr.get("State", "")
    if state not in USABLE_STATES:
        problems.append(Problem("compute.capacity.id", f"{cap.id} is {state!r} (allowed: {', '.join(USABLE_STATES)})"))
    if cr.get("InstanceType") != spec.compute.instance_type:
        problems.append(
            Problem(
                "compute.instance_type",
                f"{spec.compute.instance_type} does not match {cap.id}, which "
                f"reserves {cr.get('InstanceType')} (allowed: {cr.get('InstanceType')})",
            )
        )
    # By zone ID where the stack's is known (subnets are placed by ID; names differ per account).
    node_id = spec.zone_id or _zone_id_of(ctx, spec.zone)
    rid = cr.get("AvailabilityZoneId")
    if (rid != node_id) if (rid and node_id) else (cr.get("AvailabilityZone") != spec.zone):
        problems.append(
            Problem(
                "zone",
                f"{spec.zone}"
                + (f" (zone ID {node_id})" if node_id else "")
                + f" does not match {cap.id}, which is in {cr.get('AvailabilityZone')} "
                f"(zone ID {cr.get('AvailabilityZoneId', '?')}; allowed: {cr.get('AvailabilityZone')}"
                + (f", zone_id {rid})" if spec.zone_id and rid else ")"),
            )
        )
    total, free = int(cr.get("TotalInstanceCount", 0)), int(cr.get("AvailableInstanceCount", 0))
    if total < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit {cap.id}, which holds {total} instances (allowed: 1..{total})",
            )
        )
    elif state == "active" and free < spec.compute.nodes:
        problems.append(
            Problem(
                "compute.nodes",
                f"{spec.compute.nodes} nodes do not fit {cap.id}: {total - free} of its "
                f"{total} instances are in use by other launches, {free} free (allowed: 1..{free})",
            )
        )
    start, end = cr.get("StartDate"), cr.get("EndDate")
    if state == "scheduled" and isinstance(start, dt.datetime):
        ctx.notes.append(
            f"{cap.id} ({kind}) is scheduled: it starts {when(start)}"
            + (f" and ends {when(end)}" if end else "")
            + "; the GPU nodes launch only from its start: the stack can be created now, and the nodes "
            "appear then (EKS scales its node group up by itself, PCS launches them)"
        )
    elif end is not None:
        left = end - now if isinstance(end, dt.datetime) else None
        hours = f" ({left.total_seconds() / 3600:.0f} h from now)" if left is not None else ""
        ctx.notes.append(
            f"{cap.id} ({kind}) is {state}"
            + (f" since {when(start)}" if start else "")
            + f"; it ends {when(end)}{hours}"
        )
    else:
        ctx.notes.append(f"{cap.id} ({kind}) is {state}, with no end date")
    return problems


def planned_placement_group(ctx: Context) -> str | None:
    """The placement group the stack launches into: ``None`` for none. ``compute.capacity.
    placement_group`` names the group an ODCR was made in (the stack then launches into it and
    creates none); otherwise the stack creates its own group when ``interconnect.placement``."""
    if ctx.spec.compute.capacity.placement_group:
        return ctx.spec.compute.capacity.placement_group
    return "<the stack's own group>" if ctx.spec.interconnect.placement else None


def _group_name(arn: str | None) -> str | None:
    return arn.rsplit("/", 1)[-1] if arn else None


def check_placement(ctx: Context) -> list[Problem]:
    """The placement group and the reservation must agree. ParallelCluster's
    PlacementGroupCapacityReservationValidator (aws/aws-parallelcluster
    cli/src/pcluster/validators/ec2_validators.py at 451cc53, 2024-10-24): an ODCR made in a
    placement group matches only launches into that group (error otherwise), and a launch with
    no group needs an ODCR made without one; an ODCR without a group under a chosen group is
    a warning (insufficient capacity outside the reservation's placement)."""
    spec = ctx.spec
    if not spec.compute.capacity.pre_placed:
        raise NotApplicable(f"{spec.compute.capacity.type} capacity")
    cr = _reservation(ctx)
    if cr is None:
        return []  # the capacity check has said it is missing
    odcr_group = _group_name(cr.get("PlacementGroupArn"))
    chosen = planned_placement_group(ctx)
    cid = spec.compute.capacity.id
    if odcr_group and chosen is None:
        return [
            Problem(
                "compute.capacity.placement_group",
                f"{cid} was made in cluster placement group {odcr_group!r}; it matches only launches into "
                "that group, and this stack launches into none, so no node would use the reservation "
                f"(allowed: placement_group: {odcr_group})",
            )
        ]
    if odcr_group and chosen is not None and chosen != odcr_group:
        return [
            Problem(
                "compute.capacity.placement_group",
                f"{cid} was made in placement group {odcr_group!r}, but the stack launches into {chosen}; "
                f"only launches into {odcr_group!r} match it (allowed: placement_group: {odcr_group})",
            )
        ]
    if not odcr_group and chosen is not None:
        ctx.notes.append(
            f"{cid} has no placement group but the stack uses one: launches may fail for capacity "
            "outside the reservation's placement (ParallelCluster warns the same)"
        )
    return []
