"""``render``, ``submit`` and ``status``: validation as a command over a deployed stack's outputs.

    gpu-cluster validate render STACK --out DIR   [--outputs FILE]
    gpu-cluster validate render STACK --out DIR --job ddp|model-parallel|tasks --job-arg ARG ...
    gpu-cluster validate submit STACK             [--outputs FILE] [--here | --ssh CMD] ...
    gpu-cluster validate status STACK             [--outputs FILE] [--here | --ssh CMD]

The outputs come from ``--outputs FILE`` (what ``pulumi stack output --json --show-secrets``
prints), else from ``pulumi stack output`` itself; ``render`` of a stack whose file is here (a
bundled example, one of the user's project found as Pulumi finds it, or a path) that is not
deployed falls back to the offline plan's outputs and says so. Each run gets its own run
directory (``<mount>/validation/<cluster>/<run-id>``) and its files come back to
``out/validate/<stack>/<run-id>/``. Exit codes: 0 pass, 1 warn, 2 fail, 3 could not run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from gpu_cluster.components.contract import ClusterOutputs, OutputsError, load_outputs, read_outputs
from gpu_cluster.components.image_pins import mirrored
from gpu_cluster.components.image_pins import pinned as pinned_ref
from gpu_cluster.components.problems import output_dir_problem
from gpu_cluster.components.stack_locate import BUNDLED_DIR, STACK_HELP, locate, stack_label
from gpu_cluster.components.validation_time import Settings, cost_usd, estimate, fit_budget, search_estimate, total_s
from gpu_cluster.workloads.launch import bundle as code_bundle
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch.jobset import JobSetSpec, network_policy
from gpu_cluster.workloads.launch.jobset import render as render_jobset
from gpu_cluster.workloads.launch.jobset import to_yaml
from gpu_cluster.workloads.launch.sbatch import LaunchSpec
from gpu_cluster.workloads.launch.sbatch import render as render_sbatch
from gpu_cluster.workloads.validate.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]


class CommandError(RuntimeError):
    """A problem the user can fix; printed without a traceback, exit 3."""


@dataclass(frozen=True, slots=True)
class Loaded:
    outputs: ClusterOutputs
    source: str
    """Where they came from, for the first line a person reads."""
    offline: bool = False
    plan: dict[str, Any] | None = None
    """The offline plan's JSON document (its resources) where it was run: what the liveness model
    checks the rendered job against."""


def _stack_file(stack: str) -> Path | None:
    """The stack's file where there is one here: a name found as Pulumi finds it, or a path."""
    where = locate(stack)
    return where.path.resolve() if where.found else None


def _offline_plan(stack: str) -> tuple[dict[str, Any] | None, str]:
    """The offline plan of ``stack`` as JSON (``gpu-cluster plan STACK --json -``), or None and why.
    The plan imports Pulumi; the validation side does not, so it runs as its own process. It exits 2
    when the stack's own liveness does not hold and still writes the document."""
    path = _stack_file(stack)
    done = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.components.plan", str(path or stack), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    try:
        doc = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return None, done.stderr.strip()[-600:] or f"exit {done.returncode}"
    return doc, ""


def load(stack: str, outputs_file: Path | None, *, allow_plan: bool) -> Loaded:
    if outputs_file is not None:
        return Loaded(load_outputs(outputs_file), str(outputs_file))
    where = locate(stack)
    name = where.name  # `pulumi --stack` takes the name, also where a path was given
    pulumi = shutil.which("pulumi")
    why = "the Pulumi CLI is not installed"
    if pulumi:
        done = subprocess.run(
            [pulumi, "stack", "output", "--json", "--show-secrets", "--stack", name],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=_project_dir(where.path) if where.found else None,
        )
        if done.returncode == 0:
            return Loaded(read_outputs(json.loads(done.stdout), f"pulumi stack {name}"), f"pulumi stack {name}")
        why = f"`pulumi stack output --stack {name}` failed: {done.stderr.strip()[-300:]}"
    if allow_plan and where.found:
        doc, err = _offline_plan(stack)
        if doc is None:
            raise CommandError(f"offline plan of {stack} failed: {err}")
        return Loaded(
            read_outputs(doc["outputs"], f"offline plan of {name}"),
            f"the offline plan of {_described(where.path, name)} ({why}): placeholder endpoints and IDs",
            True,
            doc,
        )
    if allow_plan:
        why += f"; and {where.missing()}"
    raise CommandError(
        f"no outputs for stack {stack!r}: {why}; pass --outputs FILE "
        f"(from `pulumi stack output --json --show-secrets --stack {name} > FILE`)"
    )


def _described(path: Path, name: str) -> str:
    """A bundled stack by its name; any other by its name and file."""
    if path.resolve().parent == BUNDLED_DIR:
        return f"bundled stack {name}"
    return f"stack {name}, {path}"


def _project_dir(stack_file: Path) -> Path:
    """Where ``pulumi`` runs for a stack file: the folder of the project it belongs to."""
    from gpu_cluster.components.stack_locate import find_project

    project = find_project(stack_file.resolve().parent)
    return project.parent if project is not None else Path.cwd()


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    run_id: str
    run_dir: str
    files: dict[str, str]
    """File name -> text, exactly what submit hands to the scheduler."""
    job: vjob.ValidationJob
    jobset: dict[str, Any] | None = None
    configmap: dict[str, Any] | None = None
    networkpolicy: dict[str, Any] | None = None
    timing: list[str] = field(default_factory=list)
    """What the validation is expected to take and cost, and what a budget gave up."""
    spec: Any = None
    """The launcher's spec it was rendered from (JobSetSpec or LaunchSpec)."""


# ``render``'s flags at their defaults: what ``gpu-cluster plan`` renders for the liveness model.
DEFAULT_RENDER: dict[str, Any] = dict(
    python=None,
    image=None,
    env=[],
    run_arg=[],
    cpu=False,
    procs_per_node=None,
    time_limit=60,
    rdzv_port=29500,
    no_drain=False,
    shared=False,
    budget=None,
)


def liveness_job(r: Rendered) -> Any:
    """The rendered job as the liveness model reads it (components/liveness.Job)."""
    from gpu_cluster.workloads.launch import liveness_view

    if r.jobset is not None:
        return liveness_view.from_jobset(r.spec, [m for m in (r.jobset, r.networkpolicy) if m is not None])
    return liveness_view.from_sbatch(r.spec)


def check_liveness(loaded: Loaded, rendered: Rendered) -> Any:
    """The liveness of the rendered job on the plan the outputs came from, or None where no plan
    is at hand (outputs from a file or from Pulumi, for a stack with no stack file here)."""
    from gpu_cluster.components import liveness

    if loaded.plan is None:
        return None
    return liveness.evaluate(liveness.plan_from_json(loaded.plan), liveness_job(rendered))


def say_liveness(result: Any, say: Callable[[str], None], stack: str) -> bool:
    """Print the liveness verdict; True when the stack may be called ready."""
    from gpu_cluster.components import liveness

    if result is None:
        say(
            f"liveness: not checked (no plan of {stack} here: the model reads the stack file's plan; "
            "render a stack whose file is here: a name in your Pulumi project, or a path)"
        )
        return True
    if result.holds:
        counts = liveness.count_line(result)
        say(f"liveness: holds ({counts}): every pod of this job would be admitted, scheduled and started")
        return True
    for line in liveness.render_lines(result, verbose=False):
        say(f"liveness: {line}")
    say(
        f"NOT READY: liveness does not hold for {stack} ({len(result.failed)} check(s) fail): the job would "
        "not run on this cluster; fix the above and render again"
    )
    return False


def plan_time(outs: ClusterOutputs, budget_min: float | None) -> tuple[Settings, list[str]]:
    """The validation's settings for ``budget_min`` (None: the defaults) and lines saying what it
    is expected to take, cost and (to fit the budget) give up. Raises CommandError when not even
    the least the validation can do fits."""
    from gpu_cluster.components.catalog import load_catalog

    it = load_catalog().get(outs.instance_type)
    settings = Settings()
    dropped: tuple[str, ...] = ()
    if budget_min is not None:
        fit = fit_budget(it, outs.nodes, budget_min * 60.0)
        if not fit.fits:
            raise CommandError(
                f"--budget {budget_min:g}: the validation of {outs.nodes} x {outs.instance_type} needs "
                f"about {fit.seconds / 60:.1f} min even after giving up {', '.join(fit.dropped)} "
                f"(allowed: --budget {fit.seconds / 60:.1f} or more)"
            )
        settings, dropped = fit.settings, fit.dropped
    phases = estimate(it, outs.nodes, settings)
    search = search_estimate(it, outs.nodes, settings)
    base = total_s(phases)
    lines = [
        f"expected cluster time {base / 60:.1f} min (${cost_usd(base, it, outs.nodes):,.0f} at the on-demand "
        f"price; the pairwise search adds {search.seconds / 60:.1f} min when it runs): "
        + ", ".join(f"{p.phase} {p.seconds:.0f} s" for p in phases)
    ]
    if dropped:
        lines.append(f"to fit --budget {budget_min:g} min, gave up: {', '.join(dropped)}")
    return settings, lines


def render_run(
    outs: ClusterOutputs, args: argparse.Namespace, run_id: str, *, bundle: code_bundle.Bundle | None = None
) -> Rendered:
    bundle = bundle or code_bundle.build()
    env = dict(kv.split("=", 1) for kv in args.env)
    if getattr(args, "job", None):
        return _render_user_job(outs, args, run_id, bundle, env)
    settings, timing = plan_time(outs, getattr(args, "budget", None))
    run_args = tuple(args.run_arg)
    skip: tuple[str, ...] = ()
    if getattr(args, "budget", None) is not None:
        run_args = settings.run_args() + run_args  # the user's own --run-arg still wins (argparse: last one)
        env.setdefault("GPUC_GATE_GEMM_SECONDS", f"{settings.gemm_seconds:g}")
        skip = tuple(name for name, on in (("storage", settings.storage), ("ddp", settings.ddp)) if not on)
    job = vjob.for_cluster(
        outs,
        run_id,
        bundle,
        python=args.python,
        cpu=args.cpu,
        procs_per_node=args.procs_per_node,
        run_args=run_args,
        extra_env=env,
        drain=not args.no_drain,
        strict=bool(getattr(args, "strict", False)),
        time_limit_min=args.time_limit,
        rdzv_port=args.rdzv_port,
        exclusive=not args.shared,
    )
    job = replace(job, skip_steps=skip)
    if outs.scheduler.kind == "slurm":
        launch = vjob.sbatch_spec(job)
        script = render_sbatch(launch)
        return Rendered(
            run_id=run_id, run_dir=job.workdir, files={"validate.sbatch": script}, job=job, timing=timing, spec=launch
        )
    return _kubernetes(
        vjob.cluster_jobset(outs, job, run_id, image=args.image), bundle, run_id, job.workdir, job, timing
    )


def _kubernetes(
    spec: JobSetSpec, bundle: code_bundle.Bundle, run_id: str, run_dir: str, job: vjob.ValidationJob, timing: list[str]
) -> Rendered:
    """A JobSet with the ConfigMap that carries its code and the NetworkPolicy that admits only its pods."""
    from gpu_cluster.workloads.validate import kube

    manifest = render_jobset(spec)
    cm = kube.configmap(manifest["metadata"]["name"], manifest["metadata"]["namespace"], bundle)
    policy = network_policy(spec)
    return Rendered(
        run_id=run_id,
        run_dir=run_dir,
        job=job,
        jobset=manifest,
        configmap=cm,
        networkpolicy=policy,
        timing=timing,
        files={"jobset.yaml": to_yaml(manifest), "configmap.yaml": to_yaml(cm), "networkpolicy.yaml": to_yaml(policy)},
        spec=spec,
    )


def _render_user_job(
    outs: ClusterOutputs, args: argparse.Namespace, run_id: str, bundle: code_bundle.Bundle, env: dict[str, str]
) -> Rendered:
    """``render --job PATTERN``: the user's job onto the stack, with the fabric's wiring."""
    from gpu_cluster.workloads.launch import userjob

    spec = userjob.user_job(
        outs,
        args.job,
        tuple(args.job_arg),
        run_id,
        bundle,
        python=args.python,
        image=args.image,
        cpu=args.cpu,
        procs_per_node=args.procs_per_node,
        extra_env=env,
        time_limit_min=args.time_limit,
        rdzv_port=args.rdzv_port,
        exclusive=not args.shared,
    )
    job = vjob.for_cluster(outs, run_id, bundle, python=args.python, cpu=args.cpu, runs_dir=userjob.JOBS_DIR)
    if isinstance(spec, LaunchSpec):
        return Rendered(
            run_id=run_id, run_dir=spec.workdir, job=job, files={f"{args.job}.sbatch": render_sbatch(spec)}, spec=spec
        )
    return _kubernetes(spec, bundle, run_id, spec.workdir, job, [])


def _env_pair(text: str) -> str:
    if "=" not in text or not text.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return text


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: allowed a finite number of minutes > 0")
    return value


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("stack", help=STACK_HELP)
    p.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")


def add_job(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-id", help="name of the run directory (default: UTC time + 4 hex digits)")
    p.add_argument(
        "--python",
        help="Slurm: interpreter with torch on every node (default: a shared virtualenv the "
        "job creates once under <mount>/gpu-cluster); Kubernetes: the image's",
    )
    p.add_argument(
        "--image",
        help="Kubernetes image (default: the fabric's image in the catalog; "
        f"{vjob.DEFAULT_IMAGE} where it names none or with --cpu), by the stack's images: pin of its tag "
        "where it has one; submit resolves a tag left unpinned to its digest",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        type=_env_pair,
        metavar="NAME=VALUE",
        help="extra environment for every step (repeatable)",
    )
    p.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every `validate run` phase, e.g. --run-arg=--multi-max --run-arg=64M",
    )
    p.add_argument("--cpu", action="store_true", help="the nodes have no GPU (a test cluster): CPU ranks, no floors")
    p.add_argument("--procs-per-node", type=int, help="with --cpu: ranks per node (default 1)")
    p.add_argument(
        "--strict", action="store_true", help="with --cpu: a matmul straggler fails its node (default: an observation)"
    )
    p.add_argument("--time-limit", type=int, default=60, help="job time limit in minutes (default 60)")
    p.add_argument("--rdzv-port", type=int, default=29500)
    p.add_argument(
        "--no-drain",
        action="store_true",
        help="do not take the nodes the judge fails out of service (Slurm: drain; Kubernetes: submit taints them NoSchedule)",
    )
    p.add_argument("--shared", action="store_true", help="do not ask for whole nodes (Slurm --exclusive off)")
    p.add_argument(
        "--budget",
        type=_minutes,
        metavar="MINUTES",
        help="fit the phases to this much cluster time (fewer iterations and sizes, a shorter GEMM, "
        "then the storage and DDP phases), saying what was given up",
    )


def add_access(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--here", action="store_true", help="Slurm: run sbatch/squeue on this machine (the login node)")
    g.add_argument(
        "--ssh",
        help="Slurm: remote shell to the login node, e.g. 'ssh ec2-user@10.0.1.5' "
        "(default: the stack's access.ssh_command when it runs commands)",
    )


def job_image(outs: ClusterOutputs, args: argparse.Namespace) -> str | None:
    """The image the Kubernetes pods run: ``--image``, else the fabric's in the catalog (by the
    stack's pin where it has one); None on Slurm."""
    if outs.scheduler.kind != "kubernetes":
        return None
    if args.image:
        return pinned_ref(str(args.image), outs.scheduler.images)
    return vjob.stack_image(outs, cpu=bool(args.cpu))


def pin_image(outs: ClusterOutputs, args: argparse.Namespace, say: Callable[[str], None]) -> argparse.Namespace:
    """``submit``: an image named by tag is resolved through its registry, with the user's
    credentials, and the job is rendered with the digest (so every pod runs the same bytes, and
    the certificate records them)."""
    from gpu_cluster.workloads.validate import registry

    image = job_image(outs, args)
    if image is None:
        return args
    through = mirrored(image, outs.scheduler.mirrors)
    if through != image:
        return _fill_mirror(image, through, args, say)
    if vjob.pinned(image):
        return args
    try:
        digest = registry.resolve(image)
    except registry.RegistryError as exc:
        raise CommandError(str(exc)) from None
    ref = registry.parse(image).pinned(digest)
    say(f"image {image} resolved through its registry: {ref}")
    return argparse.Namespace(**{**vars(args), "image": ref})


def _fill_mirror(image: str, through: str, args: argparse.Namespace, say: Callable[[str], None]) -> argparse.Namespace:
    """The job's image resolved through the stack's pull-through cache by its tag, with a manifest
    GET: a cache rule fills from a pull by tag, while a first pull by digest of an image it has not
    cached is answered as missing (aws/containers-roadmap#2837), and the pods pull by digest. A
    digest pinned already must be what the tag serves."""
    from gpu_cluster.workloads.validate import registry

    if "@" in image and ":" not in image.split("@", 1)[0].rsplit("/", 1)[-1]:
        raise CommandError(
            f"image {image}: pulled through the stack's pull-through cache, which fills only from a pull "
            "by tag (allowed: REPO:TAG or REPO:TAG@sha256:...)"
        )
    try:
        digest = registry.resolve(through, pull=True)
    except registry.RegistryError as exc:
        raise CommandError(str(exc)) from None
    ref = registry.parse(image).pinned(digest)
    say(f"image {image} pulled by tag through the stack's pull-through cache ({through.split('@')[0]}): {ref}")
    return argparse.Namespace(**{**vars(args), "image": ref})


def cmd_render(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    if why := output_dir_problem(args.out):  # before the offline plan that load may run
        raise CommandError(f"--out: {why}")
    loaded = load(args.stack, args.outputs, allow_plan=True)
    say(f"outputs: {loaded.source}")
    image = job_image(loaded.outputs, args)
    if image is not None and not vjob.pinned(image):
        say(
            f"image {image}: by tag here; submit resolves its digest through the registry and pins the job to it "
            "(or pin it in the stack: gpu-cluster pin STACK)"
        )
    if image is not None and (note := vjob.image_torch_note(image)):
        say(note)
    r = render_run(loaded.outputs, args, args.run_id or vjob.new_run_id())
    for line in r.timing:
        say(line)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in r.files.items():
        (args.out / name).write_text(text, encoding="utf-8")
        say(f"wrote {args.out / name}")
    say(f"run directory on the cluster: {r.run_dir}")
    return 0 if ready_to_run(loaded, r, args.stack, say) else int(Verdict.FAIL)


def ready_to_run(loaded: Loaded, rendered: Rendered, stack: str, say: Callable[[str], None]) -> bool:
    """The liveness of ``rendered`` on its stack's plan, said; False when it does not hold. Outputs
    from a file or from Pulumi are checked against the offline plan of the stack's file, where
    there is one."""
    if loaded.plan is None and not loaded.offline and _stack_file(stack) is not None:
        doc, err = _offline_plan(stack)
        loaded = replace(loaded, plan=doc)
        if doc is None:
            say(f"liveness: the offline plan of {stack} failed: {err}")
    return say_liveness(check_liveness(loaded, rendered), say, stack)


def _local_dir(args: argparse.Namespace, run_id: str) -> Path:
    return Path(str(args.fetch_to or "out/validate")) / stack_label(str(args.stack)) / run_id


def _verdict(dest: Path, say: Callable[[str], None]) -> int:
    report = dest / "report.json"
    if not report.is_file():
        say(f"no report came back (see the job's log in {dest}): could not run")
        return int(Verdict.UNKNOWN)
    doc = json.loads(report.read_text(encoding="utf-8"))
    md = dest / "report.md"
    if md.is_file():
        say(md.read_text(encoding="utf-8"))
    say(f"report: {dest}")
    return int(Verdict[doc["verdict"]])


def cmd_submit(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    loaded = load(args.stack, args.outputs, allow_plan=False)
    outs = loaded.outputs
    if outs.scheduler.kind == "slurm" and args.here and not shutil.which("sbatch"):  # before anything is written
        raise CommandError(
            "--here: sbatch is not on this machine's PATH (allowed: --here on the cluster's login node, else --ssh CMD)"
        )
    run_id = args.run_id or vjob.new_run_id()
    args = pin_image(outs, args, say)
    r = render_run(outs, args, run_id)
    dest = _local_dir(args, run_id)
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in r.files.items():
        (dest / name).write_text(text, encoding="utf-8")
    say(f"validating {args.stack}: {outs.nodes} x {outs.instance_type} ({outs.orchestrator}), run {run_id}")
    say(f"outputs: {loaded.source}; run directory {r.run_dir}")
    for line in r.timing:
        say(line)
    timeout = args.time_limit * 60 + 600
    if outs.scheduler.kind == "slurm":
        from gpu_cluster.workloads.validate import slurm

        from gpu_cluster.workloads.validate import slurm_admit

        shell = slurm.shell_for(args.ssh or outs.access.ssh_command, args.here)
        # Registration-drained nodes (Azure Slurm) return to work only if the judge passes them (I6).
        adm = slurm_admit.open_admission(shell, outs.scheduler.partition, run_id, outs.nodes, say)
        sbatch_args = adm.sbatch_args() if adm else ()
        job = slurm.SlurmJob.submit(shell, r.run_dir, r.files["validate.sbatch"], sbatch_args)
        say(
            f"submitted Slurm job {job.job_id} to partition {outs.scheduler.partition}"
            + (f" in reservation {adm.reservation}" if adm else "")
        )
        final = job.follow(expected_nodes=outs.nodes, poll_s=args.poll, timeout_s=timeout, say=say)
        got = job.fetch(dest)
        say(
            f"job {job.job_id} ended {final.state}"
            + (f" (exit {final.exit_code})" if final.exit_code is not None else "")
            + f"; fetched {', '.join(sorted(got)) or 'nothing'}"
        )
        if adm:
            slurm_admit.close_admission(shell, adm, dest / "report.json", say)
    else:
        from gpu_cluster.workloads.validate import kube

        assert r.jobset is not None and outs.access.kubeconfig is not None
        api = kube.KubeApi(outs.access.kubeconfig)
        return _submit_kubernetes(api, r, outs, dest, args, say, timeout)
    return _verdict(dest, say)


def _submit_kubernetes(
    api: Any,
    r: Rendered,
    outs: ClusterOutputs,
    dest: Path,
    args: argparse.Namespace,
    say: Callable[[str], None],
    timeout: float,
) -> int:
    from gpu_cluster.workloads.validate import kube_submit

    assert r.jobset is not None
    kube_submit.run(api, r.jobset, r.networkpolicy, r.job, r.run_id, outs, dest, args, say, timeout)
    return _verdict(dest, say)


def cmd_status(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    loaded = load(args.stack, args.outputs, allow_plan=False)
    outs = loaded.outputs
    if outs.scheduler.kind == "slurm":
        from gpu_cluster.workloads.validate import slurm

        rows = slurm.node_states(
            slurm.shell_for(args.ssh or outs.access.ssh_command, args.here), outs.scheduler.partition
        )
    else:
        from gpu_cluster.workloads.validate import kube

        assert outs.access.kubeconfig is not None
        rows = kube.node_states(kube.KubeApi(outs.access.kubeconfig), outs.scheduler.node_selector)
    say(f"{args.stack}: {len(rows)} GPU node(s) of {outs.nodes} expected ({outs.instance_type})")
    width = max((len(n) for n, _, _ in rows), default=4)
    for node, state, reason in rows:
        say(f"  {node:<{width}}  {state:<24} {reason}")
    return 0 if len(rows) >= outs.nodes else 1


def add_parsers(sub: Any) -> None:
    render = sub.add_parser("render", help="write what submit would submit (sbatch script or JobSet YAML)")
    add_common(render)
    add_job(render)
    render.add_argument("--out", type=Path, required=True, dest="out")
    render.add_argument(
        "--job",
        choices=("ddp", "model-parallel", "tasks"),
        help="render a user job of this pattern instead of the validation run",
    )
    render.add_argument(
        "--job-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument of the --job module (repeatable, in order), e.g. --job-arg=--data --job-arg=/fsx/tok",
    )
    submit = sub.add_parser("submit", help="run the validation on a deployed stack and bring the report back")
    add_common(submit)
    add_job(submit)
    add_access(submit)
    submit.add_argument("--fetch-to", help="where runs come back (default out/validate)")
    submit.add_argument("--poll", type=float, default=10.0, help="seconds between progress checks (default 10)")
    submit.add_argument("--delete", action="store_true", help="Kubernetes: delete the JobSet after fetching")
    status = sub.add_parser("status", help="the cluster's GPU nodes with their state and drain/taint reasons")
    add_common(status)
    add_access(status)


def dispatch(args: argparse.Namespace, say: Callable[[str], None] = print) -> int:
    handlers = {"render": cmd_render, "submit": cmd_submit, "status": cmd_status}
    try:
        return handlers[args.cmd](args, say)
    except (OutputsError, CommandError, LaunchSpecError) as exc:
        print(f"validate {args.cmd}: {exc}", file=sys.stderr)
        return int(Verdict.UNKNOWN)
    except (RuntimeError, TimeoutError) as exc:  # scheduler errors: the message says which command failed
        print(f"validate {args.cmd}: {exc}", file=sys.stderr)
        return int(Verdict.UNKNOWN)
