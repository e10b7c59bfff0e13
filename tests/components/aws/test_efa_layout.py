"""The EFA interface layout for every AWS type in the catalog, and its refusals."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_cluster.components.aws.interconnect import EfaLayoutError, efa_layout
from gpu_cluster.components.catalog import InstanceType, load_catalog

AWS_TYPES = load_catalog().names("aws")


def _with_counts(it: InstanceType, cards: int, efa: int) -> InstanceType:
    return dataclasses.replace(it, network=dataclasses.replace(it.network, network_cards=cards, efa_interfaces=efa))


def test_catalog_has_aws_types() -> None:
    assert {"p5.48xlarge", "p5en.48xlarge"} <= set(AWS_TYPES)


@pytest.mark.parametrize("itype", AWS_TYPES)
def test_layout_matches_the_aws_page(itype: str) -> None:
    it = load_catalog().get(itype)
    nics = efa_layout(it)
    cards = it.network.network_cards

    primary = nics[0]
    assert (primary.network_card_index, primary.device_index, primary.interface_type) == (0, 0, "interface")
    assert sum(n.is_efa for n in nics) == it.network.efa_interfaces
    # One EFA per card, card 0's at device 1 behind the primary ENA.
    efa_cards = sorted(n.network_card_index for n in nics if n.is_efa)
    assert efa_cards == list(range(cards))
    for n in nics[1:]:
        assert n.interface_type == "efa-only"
        assert n.device_index == (1 if n.network_card_index == 0 else 0)
    assert len({(n.network_card_index, n.device_index) for n in nics}) == len(nics)


def test_p5_has_33_interfaces_and_32_efa() -> None:
    nics = efa_layout(load_catalog().get("p5.48xlarge"))
    assert len(nics) == 33
    assert [n.interface_type for n in nics[:3]] == ["interface", "efa-only", "efa-only"]
    assert [(n.network_card_index, n.device_index) for n in nics[:3]] == [(0, 0), (0, 1), (1, 0)]


def test_card_zero_without_efa_gets_only_the_primary() -> None:
    it = _with_counts(load_catalog().get("p5en.48xlarge"), cards=4, efa=3)
    nics = efa_layout(it)
    assert [(n.network_card_index, n.device_index, n.interface_type) for n in nics] == [
        (0, 0, "interface"),
        (1, 0, "efa-only"),
        (2, 0, "efa-only"),
        (3, 0, "efa-only"),
    ]


@pytest.mark.parametrize("cards,efa", [(16, 8), (8, 16), (4, 0), (0, 0)])
def test_inconsistent_counts_are_refused_with_the_numbers(cards: int, efa: int) -> None:
    it = _with_counts(load_catalog().get("p5.48xlarge"), cards=cards, efa=efa)
    with pytest.raises(EfaLayoutError) as err:
        efa_layout(it)
    assert f"network_cards={cards}" in str(err.value) and f"efa_interfaces={efa}" in str(err.value)


def test_non_efa_type_is_refused() -> None:
    gcp = load_catalog().get(load_catalog().names("gcp")[0])
    with pytest.raises(EfaLayoutError, match="not 'efa'"):
        efa_layout(gcp)
