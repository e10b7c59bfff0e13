"""busbw.png as data (issue 26 item 8): the figure ``report.figure`` returns is read line by line
(labels and points, never pixels): each sweep's measured curve, the model's expected curve and the
warn and fail floors across the sizes the model covers, the size judged, and a title that names the
verdict and the check that decided it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_cluster.components.bandwidth import FAIL_OF_EXPECTED, WARN_OF_EXPECTED
from tests.workloads.test_validate_judge import _write_run
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.report import Curve, Report, figure, plot, title, write
from gpu_cluster.workloads.validate.verdict import Measurement, Verdict


def _lines(fig: Any) -> dict[str, tuple[list[float], list[float], str]]:
    """label -> (x, y, marker) of every line on the figure's one axes."""
    (ax,) = fig.axes
    out = {}
    for line in ax.get_lines():
        label = line.get_label()
        assert label not in out, f"two lines labelled {label!r}"
        out[label] = ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()], line.get_marker())
    return out


def _report(tmp_path: Path, *, multi: float, node2_rate: float) -> Report:
    _write_run(tmp_path, multi=multi, node2_rate=node2_rate)
    return judge(tmp_path, instance_type="p5.48xlarge", local=False)


def test_each_sweep_has_its_expected_curve_and_both_floors_across_sizes(tmp_path: Path) -> None:
    rep = _report(tmp_path, multi=480.0, node2_rate=730.0)
    fig = figure(rep)
    assert fig is not None
    lines = _lines(fig)
    multi = next(m for m in rep.measurements if m.check == "multi_node.all_reduce")
    curve = next(c for c in rep.curves if c.scope == "all nodes")
    assert len(curve.expected) >= 3, "the model covers several sizes of the sweep"

    xs, ys, _ = lines["all_reduce measured (all nodes)"]
    assert list(zip(xs, ys)) == [(float(s), v) for s, v in curve.points]
    ex, ey, _ = lines["all_reduce expected, model (all nodes)"]
    assert list(zip(ex, ey)) == [(float(s), v) for s, v in curve.expected]
    (warn_key,) = [k for k in lines if k.startswith(f"all_reduce warn floor, {WARN_OF_EXPECTED:.0%} of expected")]
    (fail_key,) = [k for k in lines if k.startswith(f"all_reduce fail floor, {FAIL_OF_EXPECTED:.0%} of expected")]
    wx, wy, _ = lines[warn_key]
    fx, fy, _ = lines[fail_key]
    assert wx == ex and fx == ex, "the floors span the sizes the model covers, not one point"
    # The tiers of the expected curve, widened (never raised) where the latency's share is large.
    assert wy == pytest.approx([w for _, w, _ in curve.model_floors])
    assert fy == pytest.approx([f for _, _, f in curve.model_floors])
    assert all(
        w <= y * WARN_OF_EXPECTED + 0.06 and f <= y * FAIL_OF_EXPECTED + 0.06
        for (_, w, f), y in zip(curve.model_floors, ey)
    )
    assert "widened for the basis and size" in fail_key, "32 MiB's floor is wider than 16 GiB's"
    # The floors drawn are the floors judged: at the size judged they are the measurement's (which
    # gpu_cluster.components.bandwidth rounds to 0.1 GB/s).
    at = ex.index(float(multi.at_bytes or 0))
    assert (round(wy[at], 1), round(fy[at], 1)) == (multi.floor_warn, multi.floor_fail)
    # The size judged is a vertical line, not two triangles.
    (judged,) = [k for k in lines if k.startswith("judged at ")]
    assert judged == "judged at 16 GiB" and set(lines[judged][0]) == {float(multi.at_bytes or 0)}
    assert not [k for k, (_, _, marker) in lines.items() if marker in ("v", "^")]
    # Every curve with floors (the single-node sweeps too) has its model and both floors.
    for c in rep.curves:
        if c.floor_fail is not None:
            assert f"{c.op} expected, model ({c.scope})" in lines
            assert any(k.startswith(f"{c.op} fail floor, {FAIL_OF_EXPECTED:.0%} of expected") for k in lines)


def test_a_pass_says_how_many_checks_with_a_floor_passed(tmp_path: Path) -> None:
    rep = _report(tmp_path, multi=480.0, node2_rate=730.0)
    floored = [m for m in rep.measurements if m.floor_fail is not None or m.floor_warn is not None]
    assert rep.verdict == Verdict.PASS and floored
    fig = figure(rep)
    assert fig is not None
    assert fig.axes[0].get_title() == title(rep) == f"PASS: all {len(floored)} checks with a floor passed"


def test_the_title_names_the_check_that_decided_even_when_it_is_not_bandwidth(tmp_path: Path) -> None:
    """The fabric is healthy; one node's matmul is slow. The plot's curves all pass, so a title that
    spoke of bandwidth would mislead: it names health.matmul."""
    rep = _report(tmp_path, multi=480.0, node2_rate=350.0)
    assert rep.verdict == Verdict.FAIL
    deciding = rep.deciding()
    assert deciding is not None and deciding.check.startswith("health.matmul")
    busbw = [m for m in rep.measurements if m.check.endswith(".all_reduce")]
    assert busbw and all(m.verdict == Verdict.PASS for m in busbw)
    fig = figure(rep)
    assert fig is not None
    text = fig.axes[0].get_title()
    assert text.startswith(f"FAIL: decided by {deciding.check} ({deciding.scope}): {deciding.value:g}")
    assert f"fail floor {deciding.floor_fail:g}" in text
    assert "all_reduce" not in text
    others = [m for m in rep.measurements if m.verdict == Verdict.FAIL]
    if len(others) > 1:
        assert f"(and {len(others) - 1} more check(s) FAIL)" in text


def test_a_slow_fabric_is_named_with_its_value_size_and_floor(tmp_path: Path) -> None:
    rep = _report(tmp_path, multi=300.0, node2_rate=730.0)
    multi = next(m for m in rep.measurements if m.check == "multi_node.all_reduce")
    assert multi.verdict == Verdict.FAIL and rep.deciding() is multi
    assert title(rep).startswith(
        f"FAIL: decided by multi_node.all_reduce ({multi.scope}): {multi.value:g} GB/s at 16 GiB, "
        f"fail floor {multi.floor_fail:g}"
    )
    md = write(rep, tmp_path / "out")["report.md"].read_text()
    assert f"Verdict FAIL: {rep.decided_by()}." in md


def _bare(curves: list[Curve], measurements: list[Measurement], verdict: Verdict, **kw: Any) -> Report:
    return Report(
        verdict=verdict,
        local=True,
        floors_applied=False,
        instance_type=None,
        nodes=[],
        measurements=measurements,
        transport={},
        versions={},
        curves=curves,
        **kw,
    )


def test_a_curve_without_a_model_keeps_its_floors_at_the_size_judged(tmp_path: Path) -> None:
    points = [(2**20 * 4**i, 10.0 + i) for i in range(4)]
    curve = Curve(op="all_gather", scope="all nodes", points=points, floor_warn=12.0, floor_fail=11.0, floor_at=2**26)
    m = Measurement(check="multi_node.all_gather", scope="cluster", value=11.5, unit="GB/s", floor_warn=12.0)
    m.floor_fail = 11.0
    m.at_bytes = 2**26
    m.judge()
    rep = _bare([curve], [m], Verdict.WARN)
    fig = figure(rep)
    assert fig is not None
    lines = _lines(fig)
    assert lines["all_gather warn floor 12 at 64 MiB (all nodes)"] == ([float(2**26)], [12.0], "^")
    assert lines["all_gather fail floor 11 at 64 MiB (all nodes)"] == ([float(2**26)], [11.0], "v")
    assert not [k for k in lines if "expected" in k or k.startswith("judged at")]
    assert fig.axes[0].get_title() == (
        "WARN: decided by multi_node.all_gather (cluster): 11.5 GB/s at 64 MiB, warn floor 12 (floors not applied)"
    )


def test_what_decided_when_no_measurement_did() -> None:
    rep = _bare([], [], Verdict.UNKNOWN, errors=["main: rank 3 exited 1 before measuring"])
    assert rep.decided_by() == "decided by what could not run: main: rank 3 exited 1 before measuring"
    assert _bare([], [], Verdict.UNKNOWN).decided_by() == "decided by nothing measured"


def test_nothing_to_draw_writes_no_png(tmp_path: Path) -> None:
    rep = _bare([Curve(op="all_reduce", scope="all nodes", points=[])], [], Verdict.PASS)
    assert figure(rep) is None
    assert plot(rep, tmp_path / "busbw.png") is False and not (tmp_path / "busbw.png").exists()
    drawn = _bare([Curve(op="all_reduce", scope="all nodes", points=[(2**20, 1.0), (2**22, 2.0)])], [], Verdict.PASS)
    assert plot(drawn, tmp_path / "busbw.png") is True
    assert (tmp_path / "busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
