"""The Azure preflight on recorded ARM answers: each problem it must find, and a clean pass."""

from __future__ import annotations

import io
from typing import Any, Mapping

import pytest

from gpu_cluster.components.preflight import OK, PROBLEMS, Context, run_checks
from gpu_cluster.components.preflight import azure as az
from gpu_cluster.components.preflight.__main__ import main
from gpu_cluster.components.spec import parse_spec
from tests.preflight import azure_recorded as rec

DEPLOYER = "203.0.114.7/32"
GROUP = f"/subscriptions/{rec.SUB}/resourceGroups/gpu/providers/Microsoft.Compute/capacityReservationGroups/nd"


class FakeArm:
    """Answers by path, records every call; an unknown path fails the test."""

    subscription = rec.SUB

    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = dict(answers)
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def get(self, path: str, api_version: str, query: Mapping[str, str] | None = None) -> Any:
        self.calls.append((path, api_version, dict(query or {})))
        if path not in self.answers:
            raise AssertionError(f"unexpected ARM path {path}")
        return self.answers[path]


SKUS = f"/subscriptions/{rec.SUB}/providers/Microsoft.Compute/skus"
USAGES = f"/subscriptions/{rec.SUB}/providers/Microsoft.Compute/locations/eastus/usages"
FEATURE = f"/subscriptions/{rec.SUB}/providers/Microsoft.Features/providers/Microsoft.ContainerService/features/AKSInfinibandSupport"
HOST_ENCRYPTION = (
    f"/subscriptions/{rec.SUB}/providers/Microsoft.Features/providers/Microsoft.Compute/features/EncryptionAtHost"
)


def spec_of(**over: Any) -> Any:
    raw: dict[str, Any] = {
        "name": "nd",
        "cloud": "azure",
        "region": "eastus",
        "zone": "1",
        "compute": {"instance_type": "Standard_ND96isr_H100_v5", "nodes": 4},
        "storage": {"lustre": {"size_gib": 16384, "throughput_mbps_per_tib": 125}},
        "orchestration": {"kind": "aks", "deployer_cidrs": [DEPLOYER]},
    }
    raw.update(over)
    return parse_spec(raw), raw


def run(arm: FakeArm, **over: Any) -> Any:
    spec, raw = spec_of(**over)
    return run_checks(Context(spec=spec, raw=raw, clients=arm), az.checks(None), progress=io.StringIO())


def good() -> dict[str, Any]:
    return {
        SKUS: rec.skus(rec.H100_SKU, rec.D4DS_SKU),
        USAGES: rec.usages(limit=384, current=0),
        FEATURE: rec.feature("Registered"),
        HOST_ENCRYPTION: rec.feature("Registered", "Microsoft.Compute", "EncryptionAtHost"),
    }


def test_a_subscription_that_has_everything_passes() -> None:
    arm = FakeArm(good())
    result = run(arm)
    assert result.exit_code == OK and not result.problems
    # One SKU list serves two checks (cached), filtered to the region.
    assert [c for c in arm.calls if c[0] == SKUS] == [(SKUS, az.SKUS_API, {"$filter": "location eq 'eastus'"})]


def test_a_sku_not_offered_in_the_region_is_a_problem_at_region() -> None:
    answers = good() | {SKUS: rec.skus()}
    result = run(FakeArm(answers))
    assert result.exit_code == PROBLEMS
    assert [p.path for p in result.problems] == ["region"]
    assert "not offered in eastus" in result.problems[0].reason
    # Without the SKUs the families are unknown: the quota checks say they could not check.
    assert [name for name, _ in result.unchecked] == [
        "vCPU family quota",
        "CPU pools' vCPU family quota",
        "regional vCPU quota",
    ]


def test_a_zone_without_the_size_and_a_restricted_zone_are_problems() -> None:
    result = run(FakeArm(good()), zone="3")
    assert [(p.path, "allowed: 1, 2" in p.reason) for p in result.problems] == [("zone", True)]
    restricted = good() | {SKUS: rec.skus(rec.H100_ZONE3_RESTRICTED, rec.D4DS_SKU)}
    result = run(FakeArm(restricted), zone="3")
    assert [p.path for p in result.problems] == ["zone"]
    assert "NotAvailableForSubscription" in result.problems[0].reason


def test_quota_short_of_the_nodes_names_the_family_and_the_numbers() -> None:
    result = run(FakeArm(good() | {USAGES: rec.usages(limit=384, current=96)}))
    (p,) = result.problems
    assert p.path == "compute.nodes"
    assert "384 vCPUs of standardNDSH100v5Family" in p.reason and "leaves 288" in p.reason


def test_the_cpu_pools_family_and_the_regional_total_are_quotas_too() -> None:
    """quotas.md at 0277390: a VM must fit its family's quota and the Total Regional vCPUs. The 4
    GPU nodes (384 vCPUs) fit the ND family; the 5 D4ds_v5 of the system and controller pools need
    20 of the D-series, and the region must hold all 404."""
    d_short = run(FakeArm(good() | {USAGES: rec.usages(limit=384, current=0, d_series=16)}))
    (p,) = d_short.problems
    assert (
        p.path == "region"
        and "the 5 x Standard_D4ds_v5 of the CPU pools need 20 vCPUs of standardDDSv5Family" in p.reason
    )
    assert "leaves 16" in p.reason
    regional = run(FakeArm(good() | {USAGES: rec.usages(limit=384, current=0, regional=400)}))
    (p,) = regional.problems
    assert p.path == "compute.nodes"
    assert "4 x Standard_ND96isr_H100_v5 and 5 x Standard_D4ds_v5 need 404 vCPUs of cores" in p.reason
    assert run(FakeArm(good() | {USAGES: rec.usages(limit=384, current=0, regional=404)})).exit_code == OK


def test_an_unregistered_infiniband_feature_is_a_problem() -> None:
    result = run(FakeArm(good() | {FEATURE: rec.feature("NotRegistered")}))
    (p,) = result.problems
    assert "AKSInfinibandSupport is NotRegistered" in p.reason and "az feature register" in p.reason


def test_encryption_at_host_unregistered_is_a_problem() -> None:
    """The system and controller pools encrypt at host: AKS creates them only once the subscription
    has Microsoft.Compute/EncryptionAtHost (enable-host-encryption.md:38-48 at fb060ab)."""
    off = rec.feature("Pending", "Microsoft.Compute", "EncryptionAtHost")
    result = run(FakeArm(good() | {HOST_ENCRYPTION: off}))
    (p,) = result.problems
    assert "Microsoft.Compute/EncryptionAtHost is Pending" in p.reason
    assert "az feature register --namespace Microsoft.Compute --name EncryptionAtHost" in p.reason


def test_the_command_checks_the_bundled_azure_stack() -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["azure-h100-aks", "--no-address-check"], azure_clients=FakeArm(good()), out=out, err=err)
    # The bundled stack sets no deployer_cidrs: the one problem, reported in the spec's style.
    assert code == PROBLEMS
    assert out.getvalue().startswith("orchestration.deployer_cidrs: required for aks")


def test_no_credentials_is_could_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(az.Fatal, match="no Azure credentials"):
        az.AzureClients.from_environment()


def test_the_client_sends_the_token_and_reads_a_404_as_absent() -> None:
    import json
    import urllib.error

    seen: list[Any] = []

    class Resp(io.BytesIO):
        def __enter__(self) -> "Resp":
            return self

        def __exit__(self, *a: object) -> None:
            self.close()

    def opener(req: Any, timeout: float) -> Resp:
        seen.append(req)
        if "capacityReservationGroups" in req.full_url:
            raise urllib.error.HTTPError(req.full_url, 404, "Not Found", {}, None)  # type: ignore[arg-type]
        return Resp(json.dumps(rec.feature("Registered")).encode())

    client = az.AzureClients(rec.SUB, "tok", opener=opener)
    assert client.get(FEATURE, az.FEATURES_API)["properties"]["state"] == "Registered"
    assert client.get(GROUP, az.COMPUTE_API) is None
    assert seen[0].full_url == f"{az.ARM}{FEATURE}?api-version={az.FEATURES_API}"
    assert seen[0].get_header("Authorization") == "Bearer tok"
