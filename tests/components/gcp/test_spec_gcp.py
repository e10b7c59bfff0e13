"""GCP-specific mistakes in a stack: each is one SpecError naming the path and what is allowed,
both from parse_spec and from the program as the offline engine runs it."""

from __future__ import annotations

from typing import Any, Callable

import pulumi
import pytest

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.lustre_tiers import lustre_tiers
from gpu_cluster.components.spec import SpecError, parse_spec
from tests.components.gcp.conftest import DEPLOYER, gcp_obj


def _problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(obj)
    return dict(info.value.problems)


def _with(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    obj = gcp_obj("a3-megagpu-8g")
    change(obj)
    return obj


def _zone_without(itype: str) -> str:
    """A real zone of a region that offers ``itype`` but not in that zone."""
    offered = load_catalog().get(itype).locations
    for zone in offered:
        region = zone.rsplit("-", 1)[0]
        for letter in "abcdf":
            if f"{region}-{letter}" not in offered:
                return f"{region}-{letter}"
    raise AssertionError("no such zone")


CASES: list[tuple[str, Callable[[dict[str, Any]], Any], str, str]] = [
    ("zone without the type", lambda o: o.update(zone=_zone_without("a3-megagpu-8g")), "zone", "not offered in zone"),
    (
        "lustre below the tier minimum",
        lambda o: o["storage"]["lustre"].update(size_gib=18000),
        "storage.lustre.size_gib",
        "multiples of 36000 from 36000",
    ),
    (
        "lustre off the step",
        lambda o: o["storage"]["lustre"].update(size_gib=50000),
        "storage.lustre.size_gib",
        "36000",
    ),
    (
        "lustre throughput",
        lambda o: o["storage"]["lustre"].update(throughput_mbps_per_tib=300),
        "storage.lustre.throughput_mbps_per_tib",
        "125, 250, 500, 1000",
    ),
    (
        "reservation plus placement",
        lambda o: (
            o["compute"].update(capacity={"type": "reservation", "id": "blk"}),
            o.update(interconnect={"placement": True}),
        ),
        "interconnect.placement",
        "already placed",
    ),
    (
        "capacity block is AWS only",
        lambda o: o["compute"].update(capacity={"type": "capacity-block", "id": "x"}),
        "compute.capacity.type",
        "flex-start",
    ),
    (
        "reservation name",
        lambda o: o["compute"].update(capacity={"type": "reservation", "id": "Bad_Name"}),
        "compute.capacity.id",
        "reservation name",
    ),
    (
        "aws type on gcp",
        lambda o: o["compute"].update(instance_type="p5.48xlarge"),
        "compute.instance_type",
        "a3-megagpu-8g",
    ),
    (
        "export on gcp",
        lambda o: o["storage"]["lustre"].update(import_path="gs://b/x", export_path="gs://b/y"),
        "storage.lustre.export_path",
        "aws only",
    ),
    ("label key", lambda o: o.update(tags={"Team": "ml"}), "tags.Team", "lower-case"),
    (
        "deletion protection not a boolean",
        lambda o: o["orchestration"].update(deletion_protection="no"),
        "orchestration.deletion_protection",
        "expected true or false, got 'no'",
    ),
    (
        "deletion protection on slurm",
        lambda o: o["orchestration"].update(kind="slurm", deletion_protection=False),
        "orchestration.deletion_protection",
        "only applies to gke",
    ),
]


@pytest.mark.parametrize("change,path,says", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gcp_mistake_names_its_path(change: Callable[[dict[str, Any]], Any], path: str, says: str) -> None:
    got = _problems(_with(change))
    assert path in got, got
    assert says in got[path]


@pytest.mark.parametrize(
    "tput,size,ok",
    [
        (1000, 9000, True),
        (1000, 4500, False),
        (1000, 1530000, True),
        (1000, 1539000, False),
        (1000, 1584000, True),
        (1000, 10008000, True),
        (1000, 10080000, False),
        (500, 18000, True),
        (500, 9000, False),
        (500, 3060000, True),
        (500, 3078000, False),
        (500, 3168000, True),
        (250, 36000, True),
        (250, 18000, False),
        (250, 6120000, True),
        (250, 6156000, False),
        (250, 40032000, True),
        (125, 72000, True),
        (125, 36000, False),
        (125, 12240000, True),
        (125, 12312000, False),
    ],
)
def test_managed_lustre_tier_table(tput: int, size: int, ok: bool) -> None:
    assert lustre_tiers("gcp").size_ok(size, tput) is ok
    obj = _with(lambda o: o["storage"]["lustre"].update(size_gib=size, throughput_mbps_per_tib=tput))
    if ok:
        assert parse_spec(obj).storage.lustre.size_gib == size
    else:
        assert "storage.lustre.size_gib" in _problems(obj)


def test_every_tier_minimum_and_maximum_is_accepted() -> None:
    tiers = lustre_tiers("gcp")
    assert tiers.throughputs == (125, 250, 500, 1000)
    for tput, tier in tiers.tiers.items():
        assert tiers.size_ok(tier.min, tput) and tiers.size_ok(tier.max, tput)
        assert not tiers.size_ok(tier.min - tier.step, tput) and not tiers.size_ok(tier.max + tier.large_step, tput)


def test_program_reports_gcp_mistakes_as_input_errors() -> None:
    obj = _with(lambda o: (o.update(zone=_zone_without("a3-megagpu-8g")), o["storage"]["lustre"].update(size_gib=1)))
    with pytest.raises(pulumi.InputPropertiesError) as info:
        run_offline("bad", obj, extra_config={"gcp:project": "p"})
    text = str(info.value)
    assert "zone" in text and "storage.lustre.size_gib" in text


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.30"])
def test_gke_version_out_of_support_is_refused_with_the_allowed_ones(version: str) -> None:
    got = _problems(_with(lambda o: o["orchestration"].update(kubernetes_version=version)))
    reason = got["orchestration.kubernetes_version"]
    assert f"'{version}' is out of support" in reason
    assert "allowed: 1.35 or newer, default 1.35" in reason


def test_gke_version_defaults_to_the_regular_channel_default_and_takes_newer_ones() -> None:
    assert parse_spec(_with(lambda o: None)).orchestration.kubernetes_version == "1.35"
    newer = parse_spec(_with(lambda o: o["orchestration"].update(kubernetes_version="1.36")))
    assert newer.orchestration.kubernetes_version == "1.36"


def test_no_bundled_gcp_stack_names_an_out_of_support_version() -> None:
    from gpu_cluster.components.gcp.rules import GKE_OLDEST_SUPPORTED
    from gpu_cluster.components.stack_file import bundled_stacks, load_stack

    gke = [s for s in bundled_stacks() if s.startswith("gcp-") and "gke" in s]
    assert gke, "no GKE stack bundled"
    for stack in gke:
        version = load_stack(stack, deployer_placeholder=True)[1].orchestration.kubernetes_version
        assert tuple(map(int, version.split("."))) >= tuple(map(int, GKE_OLDEST_SUPPORTED.split("."))), stack


@pytest.mark.parametrize(
    "itype,nodes,says",
    [("a3-megagpu-8g", 1, "A3 Ultra, A4 and H4D only"), ("a3-megagpu-8g", 4, "queued provisioning")],
)
def test_compact_placement_with_flex_start_is_refused_where_gke_does_not_offer_it(
    itype: str, nodes: int, says: str
) -> None:
    def flex(o: dict[str, Any], placement: Any) -> None:
        o["compute"].update(instance_type=itype, nodes=nodes, capacity={"type": "flex-start"})
        o["interconnect"] = {"placement": placement}

    assert says in _problems(_with(lambda o: flex(o, True)))["interconnect.placement"]
    assert parse_spec(_with(lambda o: flex(o, "auto"))).interconnect.placement is False


def test_compact_placement_with_single_node_flex_start_stays_on_a3_ultra() -> None:
    obj = gcp_obj("a3-ultragpu-8g")
    obj["compute"].update(nodes=1, capacity={"type": "flex-start"})
    assert parse_spec(obj).interconnect.placement is True
    obj["compute"]["capacity"] = {"type": "spot"}
    obj["compute"]["nodes"] = 4
    assert parse_spec(obj).interconnect.placement is True


def test_gcp_h100_gke_plans_no_compact_policy() -> None:
    from gpu_cluster.components.stack_file import read_stack_file

    _, obj = read_stack_file("gcp-h100-gke")
    obj["orchestration"]["deployer_cidrs"] = [DEPLOYER]
    run = run_offline("h100", obj, extra_config={"gcp:project": "p"})
    assert not run.of_type("gcp:compute/resourcePolicy:ResourcePolicy")
    pools = [r for r in run.of_type("gcp:container/nodePool:NodePool") if r.name.endswith("-pool")]
    assert pools and all(not p.inputs.get("placementPolicy") for p in pools)
