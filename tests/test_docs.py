"""What the README and docs/ state that the code can contradict.

The rule: no figure in the docs that a test here does not check against what the code computes or
prints. Every number in a page's prose (outside code blocks and code spans, links, dates and
list markers) must sit in a registered :data:`FIGURES` pattern, and each pattern's figures are
compared with the code's: a figure that drifts, or a new one nobody checks, fails here with the
page and the line. Beside it: the README stays a front door (:data:`README_MAX_LINES`), the docs
name no tracker entries, every Markdown file they cite exists, and the commands and snippets they
show run as written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Prose: what a figure is looked for in.

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_LIST_MARKER = re.compile(r"^(\s*)\d+\. ", re.M)
# Names with a digit in them that are not figures: a page's name, the first rank, a step of a page.
_NAMES = re.compile(r"\b[Dd]ay 2\b|\b[Rr]ank 0\b|\b[Pp]od 0\b|\bstep [12]\b")
# A number standing alone: not part of a word or an identifier (H100, p5.48xlarge, v26.1.0,
# mlx5_0), nor of a range or a path (1019-1023, /32); scientific notation included.
FIGURE = re.compile(r"(?<![\w.\-/:@#+])\d+(?:[.,]\d+)*(?:e-?\d+)?(?![\w\-/]|\.\d)")


def prose(page_text: str) -> str:
    """The page with its code blocks removed, each code span as ``CODE``, links' targets, URLs and
    dates removed, and list markers and names with digits dropped."""
    t = _FENCE.sub("", page_text)
    t = _CODE.sub("CODE", t)
    t = _LINK_TARGET.sub("]", t)
    t = _URL.sub("URL", t)
    t = _DATE.sub("DATE", t)
    t = _LIST_MARKER.sub(r"\1", t)
    return _NAMES.sub("NAME", t)


# ---------------------------------------------------------------------------------------------
# The figures the docs keep, and where the code says them.


@dataclass(frozen=True)
class Figure:
    page: str
    pattern: str
    """A regular expression over the page's prose; its groups are the figures."""
    expected: Callable[[], Sequence[tuple[str, ...]]]
    """The groups every match must have, in page order, from the code."""
    slow: bool = False

    def matches(self) -> list[tuple[str, ...]]:
        return [tuple(m.groups()) for m in re.finditer(self.pattern, prose(text(self.page)), re.M)]


def _g(n: float) -> str:
    return f"{n:g}"


def _verdict_codes() -> tuple[str, ...]:
    from gpu_cluster.workloads.validate.verdict import Verdict

    return tuple(str(int(v)) for v in (Verdict.PASS, Verdict.WARN, Verdict.FAIL, Verdict.UNKNOWN))


def _amg_token_minutes() -> tuple[str, ...]:
    from gpu_cluster.dashboards import TOKEN_SECONDS

    return (_g(TOKEN_SECONDS / 60),)


def _python_floor() -> tuple[str, ...]:
    import tomllib

    spec = tomllib.loads(text("pyproject.toml"))["project"]["requires-python"]
    return (spec.removeprefix(">="),)


def _job_python() -> tuple[str, ...]:
    from gpu_cluster.workloads.launch.slurm_env import MIN_PYTHON

    return (".".join(map(str, MIN_PYTHON)),)


def _eks_group() -> tuple[str, ...]:
    from gpu_cluster.components.aws.eks_sizing import NODES_PER_MANAGED_NODE_GROUP

    return (str(NODES_PER_MANAGED_NODE_GROUP),)


def _cb_early() -> tuple[str, ...]:
    from gpu_cluster.heal.aws import CB_EKS_EARLY_S

    return (_g(CB_EKS_EARLY_S / 60),)


def _floors() -> tuple[str, ...]:
    from gpu_cluster.components.bandwidth import FAIL_OF_EXPECTED, FLOOR_MESSAGE_BYTES, WARN_OF_EXPECTED

    return (f"{WARN_OF_EXPECTED:.2f}", f"{FAIL_OF_EXPECTED:.2f}", str(FLOOR_MESSAGE_BYTES >> 30))


def _curve_min() -> tuple[str, ...]:
    from gpu_cluster.components.bandwidth import CURVE_MIN_BYTES

    return (str(CURVE_MIN_BYTES >> 20),)


def _heal_limits() -> list[tuple[str, ...]]:
    from gpu_cluster.heal import policy

    return [
        (str(policy.DEFAULT_MAX_PER_HOUR),),
        (str(policy.Limits().allowed_unhealthy(1)), _g(policy.DEFAULT_MAX_UNHEALTHY)),
        (str(policy.MAX_ATTEMPTS), _g(policy.ATTEMPT_WINDOW_S / 3600)),
    ]


def _heal_exits() -> tuple[str, ...]:
    from gpu_cluster.heal.engine import EXIT_COULD_NOT_RUN, EXIT_OK, EXIT_STOPPED

    return (str(EXIT_OK), str(EXIT_STOPPED), str(EXIT_COULD_NOT_RUN))


def _plan_exits() -> tuple[str, ...]:
    """The codes the plan's own --help states, in the order the page gives them."""
    from gpu_cluster.components import plan

    epilog = re.search(r"exit (\d) planned; (\d) a stack has errors.*?; (\d) a stack could not", _help_of(plan))
    assert epilog, "gpu_cluster.components.plan's --help no longer states its exit codes"
    return epilog.groups()


def _help_of(module: object) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main(["--help"])  # type: ignore[attr-defined]
    return " ".join(out.getvalue().split())


def _preflight_exits() -> tuple[str, ...]:
    from gpu_cluster.components.preflight import OK, PROBLEMS, UNCHECKED

    return (str(OK), str(PROBLEMS), str(UNCHECKED))


def _rehearse_exits() -> tuple[str, ...]:
    from gpu_cluster.workloads.validate.rehearse import EXIT_COULD_NOT, EXIT_FAIL, EXIT_PASS

    return (str(EXIT_PASS), str(EXIT_FAIL), str(EXIT_COULD_NOT))


def _usage_exit() -> tuple[str, ...]:
    from gpu_cluster.workloads.runtime.flags import EXIT_USAGE

    return (str(EXIT_USAGE),)


def _heartbeat() -> tuple[str, ...]:
    from gpu_cluster.workloads.validate.heartbeat import EVERY_S

    return (_g(EVERY_S),)


def _loss_rtol() -> tuple[str, ...]:
    from gpu_cluster.workloads.parallel.config import LOSS_RTOL

    return (f"{LOSS_RTOL:.0e}".replace("e-0", "e-"),)


def _file_limit() -> tuple[str, ...]:
    from tests.test_house import MAX_LINES

    return (str(MAX_LINES),)


def _azure_max_nodes() -> tuple[str, ...]:
    from gpu_cluster.components.azure.rules import MAX_NODES_PER_SCALE_SET

    return (str(MAX_NODES_PER_SCALE_SET),)


def _azure_lustre() -> list[tuple[str, ...]]:
    from gpu_cluster.components.lustre_tiers import lustre_tiers

    tiers = lustre_tiers("azure").tiers
    assert all(t.min == t.step for t in tiers.values()), "a tier whose smallest size is not its step"
    return [(str(tput), str(t.min // 1024)) for tput, t in sorted(tiers.items())]


def _azure_lustre_port() -> tuple[str, ...]:
    from gpu_cluster.components.azure.network import LUSTRE_PORTS

    (single,) = [p for p in LUSTRE_PORTS if "-" not in p]
    (ranged,) = [p for p in LUSTRE_PORTS if "-" in p]
    return (single, *ranged.split("-"))


def _aks_versions() -> tuple[str, ...]:
    from gpu_cluster.components.k8s import aks

    csi = re.search(r"@(v[\d.]+) ", aks.LUSTRE_CSI_REF)
    assert csi
    return (aks.NETWORK_OPERATOR_VERSION, aks.GPU_OPERATOR_VERSION, aks.AMD_OPERATOR_VERSION, csi.group(1))


# A table row that begins with a bundled stack's name.
STACK_ROW = r"^\| ([a-z0-9]+-[a-z0-9-]+) \|"


def _b200(itype: str) -> tuple[str, ...]:
    """GPUs, network cards, EFA, NIC and node Gbps of a B200 type, and its one multi-node reference
    (nodes, GB/s, GiB) where it has one: the catalog's figures that docs/aws.md and docs/gcp.md state."""
    from gpu_cluster.components.catalog import load_catalog

    it = load_catalog().get(itype)
    net, bw = it.network, it.bandwidth
    refs = [r for r in bw.references if r.path == "multi-node"]
    ref = (str(refs[0].nodes), _g(refs[0].gbps), str(refs[0].message_bytes >> 30)) if len(refs) == 1 else ()
    counts = (it.accelerator.count, net.network_cards, net.efa_interfaces)
    return (*map(str, counts), _g(bw.nic_gbps), _g(net.total_gbps), *ref)


def _ecr_public_gb() -> tuple[str, ...]:
    from gpu_cluster.components.plan_caveats import ECR_PUBLIC_ANONYMOUS_GB_PER_MONTH

    return (str(ECR_PUBLIC_ANONYMOUS_GB_PER_MONTH),)


def _reservation_propagation() -> tuple[str, ...]:
    from gpu_cluster.components.azure.orchestration_aks import RESERVATION_ROLE_PROPAGATION

    return (RESERVATION_ROLE_PROPAGATION,)


def _aks_window() -> tuple[str, ...]:
    from gpu_cluster.components.azure import orchestration_aks as aks

    return (aks.MAINTENANCE_DAY, aks.MAINTENANCE_START_UTC, str(aks.MAINTENANCE_HOURS))


def _bundled_rows() -> list[tuple[str, ...]]:
    """stack -> nodes, type, GPUs, GPU model, for the stacks the table names (in its order)."""
    from gpu_cluster.components.catalog import load_catalog
    from gpu_cluster.components.stack_file import read_stack_file

    rows = []
    for (stack,) in Figure("docs/stacks.md", STACK_ROW, lambda: []).matches():
        raw = read_stack_file(stack)[1]
        it = load_catalog().get(raw["compute"]["instance_type"])
        nodes = raw["compute"]["nodes"]
        model = it.accelerator.model.split("-")[0]
        rows.append((stack, str(nodes), it.name, str(nodes * it.accelerator.count), model))
    return rows


def _plan_counts() -> list[tuple[str, ...]]:
    """stack -> resources as `gpu-cluster plan` counts them at the smallest and the largest size
    bench.plan_scale plans, and the EKS node groups there."""
    from bench.plan_scale import SIZES, EKS_NODE_GROUP, at_nodes
    from gpu_cluster.components.engine import run_offline
    from gpu_cluster.components.plan import _is_listed
    from gpu_cluster.components.stack_file import read_stack_file

    rows = []
    for (stack,) in Figure("docs/benchmarks.md", STACK_ROW, lambda: []).matches():
        name, raw = read_stack_file(stack)
        runs = [run_offline(name, at_nodes(raw, n)).resources for n in (SIZES[0], SIZES[-1])]
        counts = [str(sum(1 for r in rs if _is_listed(r))) for rs in runs]
        groups = [sum(1 for r in rs if r.type == EKS_NODE_GROUP) for rs in runs]
        rows.append((stack, *counts, " and ".join(map(str, groups)) if any(groups) else "none"))
    return rows


def _plan_sizes() -> list[tuple[str, ...]]:
    from bench.plan_scale import SIZES

    return [(str(SIZES[0]), str(SIZES[-1]), str(SIZES[0]), str(SIZES[-1]))]


def _metrics_cost() -> list[tuple[str, ...]]:
    """docs/plan.md, Metrics cost: the counts, the month, the interval and the prices the estimate uses."""
    from gpu_cluster.components import metrics_cost as mc
    from gpu_cluster.components.k8s.metrics import DCGM_INTERVAL

    d = mc.load()
    return [
        (
            str(len(d.dcgm_counters)),
            str(d.node_exporter_series),
            str(mc.VALIDATION_SERIES_PER_NODE),
            str(mc.VALIDATION_SERIES_PER_RUN),
            str(mc.HOURS_PER_MONTH),
            str(mc.seconds(DCGM_INTERVAL)),
            _g(d.prices["gmp-samples"].usd),
            _g(d.prices["amg-editor"].usd),
            _g(d.prices["amg-viewer"].usd),
        )
    ]


FIGURES: tuple[Figure, ...] = (
    Figure("README.md", r"Python (\d+\.\d+)\.", lambda: [_python_floor()]),
    Figure("README.md", r"exits (\d) pass, (\d) warn, (\d) fail, (\d) could not run", lambda: [_verdict_codes()]),
    Figure(
        "docs/validate.md",
        r"with the verdict: (\d) pass, (\d) warn,\s+(\d) fail, (\d) could not run",
        lambda: [_verdict_codes()],
    ),
    Figure("docs/validate.md", r"that is Python (\d+\.\d+) or newer", lambda: [_job_python()]),
    Figure("docs/validate.md", r"A Kubernetes failure is one line and exit (\d)", lambda: [(_verdict_codes()[3],)]),
    Figure(
        "docs/validate.md",
        r"warns under ([\d.]+) x and fails under ([\d.]+) x the expected figure at (\d+) GiB",
        lambda: [_floors()],
    ),
    Figure("docs/validate.md", r"Floors hold from (\d+) MiB up", lambda: [_curve_min()]),
    Figure("docs/validate.md", r"exit (\d) pass, (\d) fail, (\d) could not rehearse", lambda: [_rehearse_exits()]),
    Figure("docs/validate.md", r"a heartbeat every (\d+) s\.", lambda: [_heartbeat()]),
    Figure(
        "docs/plan.md",
        r"Exit status: (\d) planned; (\d) a\s+stack has errors[\s\S]*?; (\d) a stack could not",
        lambda: [_plan_exits()],
    ),
    Figure(
        "docs/plan.md",
        r"per NVIDIA GPU the (\d+) default counters[\s\S]*?the node exporter's\s+(\d+) series[\s\S]*?"
        r"the validation's (\d+)\s+series, and (\d) per run[\s\S]*?\((\d+) hours / the scrape interval the "
        r"stack renders, (\d+) s\)[\s\S]*?at \$([\d.]+) per million samples[\s\S]*?at \$(\d+) per active "
        r"editor[\s\S]*?\$(\d+) per viewer",
        _metrics_cost,
    ),
    Figure("docs/plan.md", r"makes CODE exit (\d) with the failing checks", lambda: [(_plan_exits()[1],)]),
    Figure(
        "docs/plan.md",
        r"exits (\d) when the account would take the stack, (\d) with\s+problems, (\d) when it could not check",
        lambda: [_preflight_exits()],
    ),
    Figure("docs/stacks.md", r"The commands exit (\d)\s", lambda: [_usage_exit()]),
    Figure(
        "docs/stacks.md",
        STACK_ROW + r" [^|]+ \| (\d+) x ([\w.-]+) \| (\d+) x (\w+) \|",
        _bundled_rows,
    ),
    Figure("docs/heal.md", r"At most (\d+) replacements in any rolling hour", lambda: [_heal_limits()[0]]),
    Figure("docs/heal.md", r"more than max\((\d), ([\d.]+) x nodes\)", lambda: [_heal_limits()[1]]),
    Figure("docs/heal.md", r"At most (\d+) replacements of a slot in (\d+) hours", lambda: [_heal_limits()[2]]),
    Figure("docs/heal.md", r"emptied (\d+) minutes early", lambda: [_cb_early()]),
    Figure(
        "docs/heal.md",
        r"Exit status: (\d) every named node is back; (\d) a limit[\s\S]*?; (\d) it could not run",
        lambda: [_heal_exits()],
    ),
    Figure("docs/day2.md", r"more than (\d+) nodes are split", lambda: [_eks_group()]),
    Figure("docs/day2.md", r"scales it to zero (\d+) minutes before", lambda: [_cb_early()]),
    Figure("docs/day2.md", r"systemd timer \(CODE, every (\d+) s\)", lambda: [_efa_interval()]),
    Figure("docs/day2.md", r"runs PCS's writer every (\d+) s over", lambda: [_eks_efa_interval()]),
    Figure("docs/day2.md", r"serves it on port (\d+) CODE", lambda: [_eks_efa_port()]),
    Figure("docs/day2.md", r"a token that lives (\d+) minutes", lambda: [_amg_token_minutes()]),
    Figure("docs/aws.md", r"at most\s+(\d+) nodes each", lambda: [_eks_group()]),
    Figure("docs/aws.md", r"the\s+window ends (\d+) minutes before the block", lambda: [_cb_early()]),
    Figure("docs/aws.md", r"anonymous pulls up to (\d+) GB a month", lambda: [_ecr_public_gb()]),
    Figure("docs/aws.md", r"two p6-b200\.48xlarge \((\d+) x B200 each\)", lambda: [_b200("p6-b200.48xlarge")[:1]]),
    Figure(
        "docs/aws.md",
        r"\*\*EFA layout\*\*: (\d+) network cards[\s\S]*?and (\d+) EFA \(",
        lambda: [_b200("p6-b200.48xlarge")[1:3]],
    ),
    Figure("docs/aws.md", r"Each EFA carries (\d+) Gbps of the node's (\d+)", lambda: [_b200("p6-b200.48xlarge")[3:5]]),
    Figure("docs/gcp.md", r"two a4-highgpu-8g \((\d+) x B200 each\)", lambda: [_b200("a4-highgpu-8g")[:1]]),
    Figure(
        "docs/gcp.md",
        r"dstack's (\d+) x A4 all_reduce, ([\d.]+) GB/s at (\d+) GiB",
        lambda: [_b200("a4-highgpu-8g")[5:8]],
    ),
    Figure("docs/azure.md", r"can take (up to \d+ minutes) to propagate", lambda: [_reservation_propagation()]),
    Figure("docs/azure.md", r"(\w+) from (\d\d:\d\d) UTC for (\d+) hours", lambda: [_aks_window()]),
    Figure("docs/azure.md", r"at most (\d+) nodes, the most one", lambda: [_azure_max_nodes()]),
    Figure("docs/azure.md", r"^\| (\d+) \| CODE \| (\d+) TiB \|", _azure_lustre),
    Figure("docs/azure.md", r"with TCP (\d+)\s+and (\d+)-(\d+) open", lambda: [_azure_lustre_port()]),
    Figure(
        "docs/azure.md",
        r"Network\s+Operator (v[\d.]+)\s[\s\S]*?GPU Operator (v[\d.]+)\s[\s\S]*?AMD's GPU operator (v[\d.]+)\s"
        r"[\s\S]*?CSI driver (v[\d.]+)\s",
        lambda: [_aks_versions()],
    ),
    Figure("docs/benchmarks.md", r"at its largest size and at (\d+) MiB", lambda: [_curve_min()]),
    Figure("docs/benchmarks.md", r"more than (\d+) nodes are split", lambda: [_eks_group()]),
    Figure(
        "docs/benchmarks.md",
        r"resources at (\d+) nodes \| resources at (\d+) nodes \| EKS node groups at (\d+) and (\d+) nodes",
        _plan_sizes,
    ),
    Figure("docs/benchmarks.md", STACK_ROW + r" (\d+) \| (\d+) \| ([\w ]+?) \|", _plan_counts, slow=True),
    Figure("docs/architecture.md", r"is longer than (\d+) lines", lambda: [_file_limit()]),
    Figure(
        "docs/workloads-jobs.md",
        r"\bexits? (\d)\b",
        lambda: [_usage_exit()] * _count("docs/workloads-jobs.md", r"\bexits? (\d)\b"),
    ),
    Figure("docs/workloads-jobs.md", r"\*\*rtol (1e-\d+)\*\*", lambda: [_loss_rtol()]),
    # The cluster lock (I9) and the GKE repair budget (I10).
    Figure("docs/heal.md", r"CODE (\d+), CODE renewed every (\d+) s from a thread", lambda: [_lease_times()]),
    Figure("docs/heal.md", r"since when \(exit (\d)\)", lambda: [(_verdict_codes()[3],)]),
    Figure("docs/heal.md", r"stopped renewing for (\d+) s is taken over", lambda: [(_lease_times()[0],)]),
    Figure("docs/heal.md", r"min \+ the (\d+) s bound\)", lambda: [_join_timeout()]),
    Figure("docs/heal.md", r"lengthens the (\d+) s by as much", lambda: [(_lease_times()[0],)]),
    # A provider's bandwidth baseline (components/bandwidth_baseline.py).
    Figure(
        "docs/validate.md",
        r"about (\d+) GB/s of all_reduce busbw at (\d+) G, warn under (\d+), drain the node under (\d+)\.",
        lambda: [_baseline()[0]],
    ),
    Figure(
        "docs/validate.md",
        r"extrapolated 2-node floors were ([\d.]+) and ([\d.]+); held, ([\d.]+) and ([\d.]+)\.",
        lambda: [_baseline()[1]],
    ),
    Figure(
        "docs/validate.md",
        r"applies from (\d+) to (\d+) nodes, where the model's bound \(no in-network reduction\) admits (\d+) GB/s; "
        r"from (\d+)\s",
        lambda: [_baseline()[2]],
    ),
    # A queued pool's retries and the wait's exit (workloads/validate/kube_queue.py).
    Figure("docs/gcp.md", r"could not fill (\d+) more times", lambda: [_kueue_retries()]),
    Figure("docs/gcp.md", r"ends\s+it in one line \(exit (\d)\)", lambda: [(_verdict_codes()[3],)]),
)


def _lease_times() -> tuple[str, ...]:
    from gpu_cluster.heal.lock import DURATION_S

    # A holder renews every third of its duration (gpu_cluster/heal/lock.py).
    return (_g(DURATION_S), _g(DURATION_S / 3))


def _join_timeout() -> tuple[str, ...]:
    from gpu_cluster.heal.policy import Limits

    return (_g(Limits().join_timeout_s),)


def _baseline() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    import dataclasses

    from gpu_cluster.components.catalog import load_catalog

    m = load_catalog().get("Standard_ND96isr_H100_v5").bandwidth
    b = m.baseline
    assert b is not None
    held = m.expected(b.op, 2, "multi-node")
    bare = dataclasses.replace(m, baseline=None).expected(b.op, 2, "multi-node")
    admits = [n for n in range(b.min_nodes, 65) if (m.bound(b.op, n, "multi-node")[0] or 0) >= b.expected_gbps]
    last = max(admits)
    return (
        (_g(b.expected_gbps), _g(b.message_bytes / 2**30), _g(b.warn_gbps), _g(b.fail_gbps)),
        tuple(
            _g(v or 0) for v in (bare.floor_warn_gbps, bare.floor_fail_gbps, held.floor_warn_gbps, held.floor_fail_gbps)
        ),
        (str(b.min_nodes), str(last), _g(b.expected_gbps), str(last + 1)),
    )


def _eks_efa_interval() -> tuple[str, ...]:
    from gpu_cluster.components.aws.efa_exporter import INTERVAL_SECONDS, writer_command

    assert f"sleep {INTERVAL_SECONDS};" in writer_command()[2]
    return (str(INTERVAL_SECONDS),)


def _eks_efa_port() -> tuple[str, ...]:
    from gpu_cluster.components.aws.efa_exporter import PORT

    return (str(PORT),)


def _efa_interval() -> tuple[str, ...]:
    from gpu_cluster.components.aws.efa_textfile import INTERVAL

    return (INTERVAL.removesuffix("s"),)


def _kueue_retries() -> tuple[str, ...]:
    from gpu_cluster.components.k8s.kueue import RETRY_STRATEGY

    return (str(RETRY_STRATEGY["backoffLimitCount"]),)


def _count(page: str, pattern: str) -> int:
    return len(re.findall(pattern, prose(text(page)), re.M))


def mask_checked(page: str, t: str) -> str:
    """``t`` with the digits of every registered figure of ``page`` masked (the groups only)."""
    chars = list(t)
    for f in FIGURES:
        if f.page == page:
            for m in re.finditer(f.pattern, t, re.M):
                for g in range(1, (m.lastindex or 0) + 1):
                    for i in range(*m.span(g)):
                        chars[i] = "#" if chars[i].isdigit() else chars[i]
    return "".join(chars)


def unchecked(page: str, t: str | None = None) -> list[str]:
    """The figures of a page that no registered pattern covers, each with its line."""
    t = mask_checked(page, prose(text(page)) if t is None else t)
    return [f"{page}: {m.group(0)!r} in: {line.strip()}" for line in t.splitlines() for m in FIGURE.finditer(line)]


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_in_the_docs_is_checked(page: str) -> None:
    assert not unchecked(page), "figures no test checks (check them in FIGURES, or drop them)"


@pytest.mark.parametrize("figure", [f for f in FIGURES if not f.slow], ids=lambda f: f"{f.page}:{f.pattern[:40]}")
def test_a_figure_is_what_the_code_says(figure: Figure) -> None:
    got = figure.matches()
    assert got, f"{figure.page}: the pattern {figure.pattern!r} is gone: update FIGURES with the page"
    assert got == [tuple(e) for e in figure.expected()]


@pytest.mark.slow
@pytest.mark.parametrize("figure", [f for f in FIGURES if f.slow], ids=lambda f: f"{f.page}:{f.pattern[:40]}")
def test_a_planned_figure_is_what_plan_counts(figure: Figure) -> None:
    got = figure.matches()
    assert got and got == [tuple(e) for e in figure.expected()]


def test_an_unchecked_figure_is_found() -> None:
    page = "docs/day2.md"
    planted = prose(text(page)) + "\nScaling takes 12 minutes.\n"
    (found,) = unchecked(page, planted)
    assert found == "docs/day2.md: '12' in: Scaling takes 12 minutes."
    assert [
        m.group(0) for m in FIGURE.finditer(prose("H100 on p5.48xlarge, `8`, v1.2.3, 2026-12-01, /32 and 1e-5"))
    ] == ["1e-5"]


# ---------------------------------------------------------------------------------------------
# The front door, tracker references, cited files.


def test_the_readme_is_a_front_door() -> None:
    readme = text("README.md")
    assert len(readme.splitlines()) <= README_MAX_LINES
    # its two set-up commands, first
    first = [ln.split()[:2] for ln in readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()]
    assert first == [["make", "demo"], ["make", "test"]]
    # and a link to every page of docs/
    for page in PAGES[1:]:
        assert f"({page})" in readme, f"the README does not link {page}"


TRACKER = re.compile(r"\b[Ii]ssues? #?\d+|\(#\d+\)|\btracker\b|/issues/\d+")


@pytest.mark.parametrize("page", [*PAGES, "policies/README.md"])
def test_no_tracker_references(page: str) -> None:
    found = [ln.strip() for ln in text(page).splitlines() if TRACKER.search(ln)]
    assert not found, f"{page} names tracker entries: {found}"


def test_a_tracker_reference_is_found() -> None:
    assert TRACKER.search("Azure (in progress, issue 23)") and TRACKER.search("see issues 26")
    assert not TRACKER.search("pytorch#135712, 23 nodes")


# Files a command writes, which the docs name without citing them.
OUTPUTS = {"report.md"}


@pytest.mark.parametrize("doc", [*PAGES, "policies/README.md"])
def test_cited_markdown_files_exist(doc: str) -> None:
    page = text(doc)
    cited = set(re.findall(r"(?<![\w./-])([\w./-]+\.md)\b", page))
    cited -= OUTPUTS
    here = (ROOT / doc).parent
    missing = [c for c in cited if not (ROOT / c).exists() and not here.joinpath(c).exists()]
    # Files of other repositories a sentence names with their repository (nccl-tests' README ...)
    missing = [c for c in missing if not re.search(rf"`[\w.-]+/[\w.-]+` `?{re.escape(c)}", page)]
    assert not missing, f"{doc} cites files that are not in the repository: {missing}"


def test_links_between_pages_reach_their_anchor() -> None:
    """``[text](page.md#anchor)``: the page exists and has a heading whose GitHub anchor is that."""
    bad = []
    for doc in PAGES:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", text(doc)):
            path = (ROOT / doc).parent / target if target else ROOT / doc
            heads = {_anchor(h) for h in re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)}
            if anchor not in heads:
                bad.append(f"{doc}: {target}#{anchor}")
    assert not bad


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# ---------------------------------------------------------------------------------------------
# What the pages show runs as shown.


def test_the_readme_example_is_a_valid_stack() -> None:
    from gpu_cluster.components.spec import parse_spec

    (block,) = [b.split("```", 1)[0] for b in text("README.md").split("```yaml\n")[1:]]
    cluster = yaml.safe_load(block)["config"]["gpu-cluster:cluster"]
    spec = parse_spec(cluster)
    assert (spec.cloud, spec.compute.instance_type, spec.orchestration.kind) == ("aws", "p5.48xlarge", "eks")


def _help(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_drain_flags_are_the_commands() -> None:
    """Slurm drains by default (`submit --no-drain` keeps nodes); `judge --drain` taints or drains."""
    page = text("docs/validate.md")
    assert "`--no-drain` keeps them in service" in page and "`validate judge --drain`" in page
    assert "--no-drain" in _help("gpu_cluster.workloads.validate", "submit")
    assert "--drain" in _help("gpu_cluster.workloads.validate", "judge")


def test_requirements_name_each_package_once() -> None:
    names = [
        re.split(r"[=<>\[ ]", ln, maxsplit=1)[0].lower()
        for ln in text("requirements.txt").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_install_tables_are_the_recorded_measurement_of_each_extra() -> None:
    """README.md and docs/library.md print bench/install_size.sh's table exactly as it recorded it
    (bench/results/install-size.txt, a dated measurement of real installs); its packages column is
    what pyproject installs, and is held to it here."""
    import tomllib

    project = tomllib.loads(text("pyproject.toml"))["project"]

    def pulumi_of(reqs: list[str]) -> set[str]:
        names = {re.split(r"[=<>\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_") for r in reqs}
        return {n for n in names if n == "pulumi" or n.startswith("pulumi_") and n != "pulumi_policy"}

    core = pulumi_of(project["dependencies"])
    extras = project["optional-dependencies"]
    recorded = text("bench/results/install-size.txt")
    for page in ("README.md", "docs/library.md"):
        printed = "gpu-cluster install sizes" + text(page).split("gpu-cluster install sizes", 1)[1].split("```", 1)[0]
        assert printed == recorded, f"{page}: the install sizes differ from bench/install_size.sh's recorded output"
    block = recorded
    rows = {m.group(1): set(m.group(2).split()) for m in re.finditer(r"^(core\S*)\s+\d+ MB\s+(.+)$", block, re.M)}
    assert set(rows) == {"core", "core+[aws]", "core+[gcp]", "core+[azure]"}
    assert rows["core"] == core
    for cloud in ("aws", "gcp", "azure"):
        assert rows[f"core+[{cloud}]"] == core | pulumi_of(extras[cloud]), cloud
