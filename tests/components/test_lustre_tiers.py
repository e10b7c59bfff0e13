"""The catalog's Lustre tiers: each cloud's sizes per throughput, with the page they come from."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpu_cluster.components.catalog import CATALOG_PATH, CatalogError
from gpu_cluster.components.lustre_tiers import load_lustre, lustre_tiers, parse_lustre


def _doc() -> dict[str, Any]:
    with open(CATALOG_PATH, encoding="utf-8") as fh:
        return dict(yaml.safe_load(fh))


def test_each_cloud_offers_its_tiers_with_their_source() -> None:
    tiers = load_lustre()
    assert set(tiers) == {"aws", "gcp", "azure"}
    for cloud, t in tiers.items():
        # AMLFS sells 40, 125, 250 and 500 MB/s per TiB (create-file-system-portal.md at f66223d).
        assert t.throughputs == ((40, 125, 250, 500) if cloud == "azure" else (125, 250, 500, 1000)), cloud
        assert t.source.url.startswith("https://") and t.source.read
    assert (
        lustre_tiers("aws").source.url
        == "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html"
    )
    assert lustre_tiers("gcp").source.url == "https://cloud.google.com/managed-lustre/docs/performance-tiers"
    assert "azure-managed-lustre" in lustre_tiers("azure").source.url


@pytest.mark.parametrize(("tput", "tib"), [(40, 48), (125, 16), (250, 8), (500, 4)])
def test_amlfs_sizes_are_the_sku_minimum_then_steps_of_it(tput: int, tib: int) -> None:
    azure = lustre_tiers("azure")
    step = tib * 1024
    assert azure.size_ok(step, tput) and azure.size_ok(3 * step, tput)
    assert not azure.size_ok(step + 1024, tput) and not azure.size_ok(step // 2, tput)


@pytest.mark.parametrize(
    "size,ok",
    [(1200, True), (2400, True), (3600, False), (4800, True), (2400 * 1000, True), (2400 * 1001, False), (600, False)],
)
def test_fsx_persistent_2_sizes_are_1200_then_steps_of_2400(size: int, ok: bool) -> None:
    # CreateFileSystem StorageCapacity: "1200 GiB, 2400 GiB, and increments of 2400 GiB", at every tier.
    for tput in (125, 250, 500, 1000):
        assert lustre_tiers("aws").size_ok(size, tput) is ok


def test_a_throughput_the_cloud_does_not_offer_takes_no_size() -> None:
    assert not lustre_tiers("gcp").size_ok(36000, 200)


def test_a_malformed_table_is_a_catalog_error_naming_the_path() -> None:
    doc = _doc()
    bad = copy.deepcopy(doc)
    bad["lustre"]["gcp"]["source"] = "nowhere"
    with pytest.raises(CatalogError, match=r"lustre\.gcp\.source: unknown source id 'nowhere'"):
        parse_lustre(bad)
    bad = copy.deepcopy(doc)
    bad["lustre"]["gcp"]["tiers"][250]["step_up_to"] = 6130000  # not on the 36000 step
    with pytest.raises(CatalogError, match=r"lustre\.gcp\.tiers\.250"):
        parse_lustre(bad)
    with pytest.raises(CatalogError, match="lustre.oracle: missing"):
        lustre_tiers("oracle")
