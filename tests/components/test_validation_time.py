"""The validation-time model: what the plan prints and `submit --budget` fits the phases to."""

from __future__ import annotations

import pytest

from gpu_cluster.components import validation_time as vt
from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.spec import bundled_stacks, load_stack


def test_the_sweep_sizes_are_the_ones_the_job_runs() -> None:
    from gpu_cluster.workloads.validate.run import sweep_start

    sizes = vt.sweep_sizes(1 << 20)
    assert sizes[-1] == 8 << 30 and sizes[0] == sweep_start(1 << 20, 8 << 30, 4)
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:]))
    assert len(vt.sweep_sizes(64 << 20)) < len(sizes)


def test_sweep_time_follows_nccl_tests_formulas() -> None:
    s = vt.Settings(iters=10, warmup=0)
    # 16 ranks, all_reduce at 480 GB/s busbw: algbw = 480 / (2 * 15/16) = 256 GB/s, one 8 GiB call
    # takes 8 GiB / 256 GB/s; a row is warmup + 2 * iters + 1 calls.
    one = (8 << 30) / 256e9
    got = vt._sweep_s("all_reduce", 480.0, 16, s, [8 << 30])
    assert got == pytest.approx(vt.ROW_OVERHEAD_S + 21 * one)
    # all_gather: factor (n-1)/n, and two placements (in-place and out-of-place).
    ag = (8 << 30) / (480e9 / (15 / 16))
    assert vt._sweep_s("all_gather", 480.0, 16, s, [8 << 30]) == pytest.approx(2 * vt.ROW_OVERHEAD_S + 2 * 21 * ag)


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_bundled_stack_has_a_time_and_a_cost(stack: str) -> None:
    _, spec = load_stack(stack, deployer_placeholder=True)
    it = load_catalog().get(spec.compute.instance_type)
    phases = vt.estimate(it, spec.compute.nodes)
    assert {p.phase for p in phases} >= {"main", "storage", "ddp", "steps"}
    assert all(p.seconds > 0 and p.basis for p in phases)
    total = vt.total_s(phases)
    assert vt.cost_usd(total, it, spec.compute.nodes) == pytest.approx(
        total / 3600 * spec.compute.nodes * it.price.usd_per_hour
    )


def test_a_64_node_cluster_is_validated_with_the_search_in_under_ten_minutes_by_the_model() -> None:
    for name in ("p5.48xlarge", "a3-megagpu-8g", "a3-ultragpu-8g"):
        it = load_catalog().get(name)
        need = vt.total_s(vt.estimate(it, 64)) + vt.search_estimate(it, 64).seconds
        assert need < 600, (name, need)


def test_a_budget_gives_up_repetitions_before_phases_and_says_so() -> None:
    it = load_catalog().get("p5.48xlarge")
    full = vt.total_s(vt.estimate(it, 16)) + vt.search_estimate(it, 16).seconds
    roomy = vt.fit_budget(it, 16, full + 60)
    assert roomy.fits and roomy.dropped == () and roomy.settings == vt.Settings()
    tight = vt.fit_budget(it, 16, full - 100)
    assert tight.fits and tight.seconds <= full - 100
    assert tight.dropped[0] == "iterations 20 -> 10"
    # Not enough for even the least the job can do: says so, with the least it needs.
    impossible = vt.fit_budget(it, 16, 30)
    assert not impossible.fits and impossible.dropped[-1] == "the storage phase" and impossible.seconds > 30
    assert impossible.settings.run_args() == ("--iters", "5", "--warmup", "2", "--sweep-min", str(64 << 20))
    assert impossible.settings.gemm_seconds == 10.0 and not impossible.settings.ddp and not impossible.settings.storage
