"""The catalog: every figure has a known source, floors follow the stated rule, every required type is there."""

from __future__ import annotations

import pytest

from gpu_cluster.components.bandwidth import FAIL_OF_EXPECTED, WARN_OF_EXPECTED
from gpu_cluster.components.catalog import CatalogError, load_catalog

REQUIRED = [
    "p4d.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "a4-highgpu-8g",
    "Standard_ND96isr_H100_v5",
    "Standard_ND96isr_H200_v5",
    "Standard_ND96isr_MI300X_v5",
]


def test_required_types_present() -> None:
    assert set(REQUIRED) <= set(load_catalog().names())


@pytest.mark.parametrize("name", REQUIRED)
def test_instance_is_consistent(name: str) -> None:
    cat = load_catalog()
    it = cat.get(name)
    b = it.bandwidth
    refs = [r.source for r in b.references]
    for sid in (
        it.accelerator.source,
        it.network.source,
        b.nvlink_source,
        b.nic_source,
        *refs,
        it.price.source,
        it.locations_source,
    ):
        src = cat.source(sid)
        assert src.url.startswith("https://") and src.read
    assert it.accelerator.count == 8 and it.accelerator.peak_dense_bf16_tflops > 100
    assert it.price.usd_per_hour > 0 and it.price.date
    assert it.locations
    # The GPU-fabric NICs never exceed the node's line rate (GCP's total also counts the host gVNIC).
    assert b.nic_gbps * b.nics <= it.network.total_gbps
    multi = b.expected(b.op, 2, "multi-node")
    assert multi.expected_gbps is not None and multi.floor_warn_gbps is not None and multi.floor_fail_gbps is not None
    assert 0 < multi.floor_fail_gbps < multi.floor_warn_gbps < multi.expected_gbps
    # The tiers of the expected figure, divided by how far figures of its kind have missed (>= 1).
    assert multi.widen >= 1.0 and multi.kind in ("measured", "fabric", "extrapolated")
    if b.baseline is None:
        assert multi.floor_warn_gbps == pytest.approx(WARN_OF_EXPECTED * multi.expected_gbps / multi.widen, abs=0.06)
        assert multi.floor_fail_gbps == pytest.approx(FAIL_OF_EXPECTED * multi.expected_gbps / multi.widen, abs=0.06)
    else:
        # Held to the provider's own baseline: never looser than the model's tiers.
        assert multi.floor_warn_gbps >= WARN_OF_EXPECTED * multi.expected_gbps / multi.widen - 0.06
        assert multi.floor_fail_gbps >= FAIL_OF_EXPECTED * multi.expected_gbps / multi.widen - 0.06
        assert "provider's baseline" in multi.basis
    assert multi.basis and multi.algorithm
    if it.cloud == "aws":
        assert it.network.fabric == "efa" and 0 < it.network.efa_interfaces <= it.network.network_cards
    else:
        assert it.network.efa_interfaces == 0 and it.network.gpu_nics > 0
    assert it.software.fabric_env and it.software.expected_transport.startswith("NET/")
    if it.accelerator.vendor == "amd":
        assert (it.software.gpu_runtime, it.software.collectives) == ("rocm", "rccl")
    else:
        assert (it.software.gpu_runtime, it.software.collectives) == ("cuda", "nccl")


def test_unknown_type_names_allowed() -> None:
    with pytest.raises(CatalogError, match="allowed: .*p5.48xlarge"):
        load_catalog().get("p9.48xlarge")
