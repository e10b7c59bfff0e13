"""A tag edit on an EKS capacity-block stack leaves the GPU node group alone; a new block still
replaces it (issue 43).

What makes a new launch template version is the provider's, not the mock's: pulumi-aws bridges
terraform-provider-aws, whose launch template update calls CreateLaunchTemplateVersion when any of
the template's data changes (``tag_specifications`` and ``capacity_reservation_specification``
among them) and only retags the template for ``tags``, ``name`` and the version settings
(internal/service/ec2/ec2_launch_template.go, resourceLaunchTemplateUpdate, ``updateKeys``, read
2026-12-07). The mock answers every template with version 1, so these tests model that rule over
what the program registers, with Pulumi's ignoreChanges applied as the engine applies it (the
state's value stands in for an ignored input: Pulumi docs, "Resource option: ignoreChanges").
"""

from __future__ import annotations

from typing import Any

from gpu_cluster.components.engine import OfflineRun, Recorded, replacements
from tests.components.aws._offline import one, run

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
# The inputs of aws.ec2.LaunchTemplate that are not template data: changing them makes no version.
NOT_VERSIONED = frozenset({"name", "namePrefix", "tags", "defaultVersion", "updateDefaultVersion"})


def _retag(raw: dict[str, Any]) -> None:
    raw["tags"] = {**raw.get("tags", {}), "cost-center": "another-one"}


def _new_block(raw: dict[str, Any]) -> None:
    raw["compute"]["capacity"]["id"] = "cr-0fedcba9876543210"


def _gpu_template(result: OfflineRun) -> Recorded:
    return one(result, LT, "-compute-gpu")


def _gpu_groups(result: OfflineRun) -> list[Recorded]:
    return [g for g in result.of_type(NODE_GROUP) if "-orchestration-gpu" in g.name]


def changed_template_data(before: Recorded, after: Recorded) -> list[str]:
    """The template data that differs once ignoreChanges has put the state's values back: non-empty
    means the provider makes a new version, which the block's node group takes by replacement."""
    applied = dict(after.inputs)
    for path in after.ignore_changes:
        applied[path] = before.inputs.get(path)
    keys = (set(before.inputs) | set(applied)) - NOT_VERSIONED
    return sorted(k for k in keys if before.inputs.get(k) != applied.get(k))


def test_a_tag_edit_on_a_capacity_block_makes_no_new_template_version() -> None:
    before, _ = run("aws-h100-capacity-block")
    after, _ = run("aws-h100-capacity-block", _retag)
    was, now = _gpu_template(before), _gpu_template(after)
    # The program does render the edit into the instances' tag specifications, so without the
    # ignore the provider would make a new version ...
    assert was.inputs["tagSpecifications"] != now.inputs["tagSpecifications"]
    assert now.ignore_changes == ("tagSpecifications",)
    # ... with it, nothing but the template's own tags moves: no new version.
    assert changed_template_data(was, now) == []
    assert now.inputs["tags"]["cost-center"] == "another-one"
    # The node groups see the same template and version; only their own tags change (in place:
    # a NodeGroup's tags are not among what replaces it), and nothing is replaced.
    groups = {g.name: g for g in _gpu_groups(before)}
    for g in _gpu_groups(after):
        assert g.inputs["launchTemplate"] == groups[g.name].inputs["launchTemplate"]
        assert g.inputs["tags"]["cost-center"] == "another-one"
        assert "tags" not in g.replace_on_changes
    assert not any(name in replacements(before, after) for name in groups)


def test_a_new_capacity_block_still_reaches_the_node_group() -> None:
    before, _ = run("aws-h100-capacity-block")
    after, _ = run("aws-h100-capacity-block", _new_block)
    was, now = _gpu_template(before), _gpu_template(after)
    assert changed_template_data(was, now) == ["capacityReservationSpecification"]
    target = now.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0fedcba9876543210"
    # A new version goes to the group as a replacement, deleted first (the block has no spare).
    groups = _gpu_groups(after)
    assert groups and all("launchTemplate" in g.replace_on_changes and g.delete_before_replace for g in groups)


def test_elsewhere_tags_still_reach_the_instances() -> None:
    """On-demand EKS and every PCS group take a new version in place (a rolling update, or PCS's own
    update), so there a tag edit still goes into the template's data and on to new instances."""
    for stack in ("aws-h100-eks", "aws-h200-slurm"):
        before, _ = run(stack)
        after, _ = run(stack, _retag)
        was, now = _gpu_template(before), _gpu_template(after)
        assert now.ignore_changes == ()
        assert changed_template_data(was, now) == ["tagSpecifications"]
