"""``validate rehearse STACK``: run the stack's rendered job on this machine, under what it declares.

    gpu-cluster validate rehearse STACK [--outputs FILE] [--image REF] [--python PATH]
                                                [--image-python PATH] [--ranks 2]

The job is rendered exactly as ``render`` renders it (one node), then its own entry command runs
here in place of the node, in private mount, network, UTS and PID namespaces:

* the root file system is this machine's under a throw-away overlay (the container's or node's
  writable layer), read-only where the pod declares ``readOnlyRootFilesystem``;
* the declared user and groups (``setpriv --reuid --regid``), with only the declared capabilities
  as the bounding set (a non-root user keeps none effective, as under a container runtime), and
  ``no_new_privs`` where ``allowPrivilegeEscalation: false``;
* the declared volumes as directories with the cloud's ownership: a Lustre claim or mount
  root-owned 0755, an emptyDir 0777, the ConfigMap's files read-only, a hostPath from a stand-in
  node that holds the fabric's net plugin where the catalog says the node has it;
* the declared environment (Kubernetes' downward API and the Indexed Job's index answered as the
  kubelet would for pod 0), the pod's host names in ``/etc/hosts``;
* torch on CPU with gloo (``GPUC_FORCE_CPU=1``); the net plugin part of the fabric check runs under
  the job's environment (``GPUC_REHEARSAL_MARKS``, :mod:`gpu_cluster.workloads.runtime.device`).

What cannot run here stands in, and says so: the image (this machine's tools; its interpreter is
the project's virtualenv, or the one ``--image-python`` names, e.g. one holding the image's own torch; its user is the Dockerfile's ``USER`` where the catalog builds it), the
node's interpreter where it is older (AL2023: ``python3`` is a real CPython 3.9 from pyenv), the
net plugin (a shared object built here exporting ``ncclNetPlugin_v8``), Slurm's ``srun`` and
``scontrol`` for the one node (shims), and the shared virtualenv a first job would make (pip has
no index here). The rehearsal edits the job in two places only: one node, and ``--ranks`` ranks.

It passes when every rank reached its first collective and recorded it inside the run directory
the job made; otherwise it fails quoting the job's own error. Exit codes: 0 pass, 2 fail, 3 could
not rehearse.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from gpu_cluster.components.catalog import load_fabric_facts
from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.components.stack_locate import STACK_HELP
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate.rehearsal.job import CouldNotRehearse, from_jobset, from_sbatch, stack_configmaps
from gpu_cluster.workloads.validate.rehearsal.sandbox import (
    EXIT_COULD_NOT,
    EXIT_FAIL,
    EXIT_PASS,
    Outcome,
    rehearse_declared,
)
from gpu_cluster.workloads.validate.rehearsal.stand_in import NODE_PYTHONS, image_interpreter

__all__ = [
    "EXIT_COULD_NOT",
    "EXIT_FAIL",
    "EXIT_PASS",
    "NODE_PYTHONS",
    "CouldNotRehearse",
    "Outcome",
    "add_parser",
    "rehearse",
    "run",
]


def _render(outs: ClusterOutputs, args: argparse.Namespace, run_id: str) -> tuple[Any, list[str]]:
    from gpu_cluster.workloads.validate import commands

    said: list[str] = []
    ns = argparse.Namespace(
        python=args.python,
        image=args.image,
        env=[],
        run_arg=["--iters", "1", "--warmup", "0"],
        cpu=False,
        procs_per_node=None,
        time_limit=60,
        rdzv_port=29500,
        no_drain=True,
        shared=False,
        budget=None,
    )
    if outs.scheduler.kind == "kubernetes" and not args.image:
        try:
            vjob.default_image(outs.fabric.type, gpu_runtime=vjob.gpu_runtime_of(outs.instance_type))
        except RuntimeError as exc:
            # Not pulled here either way: render with the catalog's own reference, and say so.
            ref = load_fabric_facts()[1][outs.fabric.type].ref
            said.append(f"image {ref}: not pulled here ({exc})")
            ns.image = ref
    return commands.render_run(outs, ns, run_id), said


def rehearse(outs: ClusterOutputs, args: argparse.Namespace, break_job: Callable[[Any], None] | None = None) -> Outcome:
    """Render ``outs``'s job for one node and rehearse it; ``break_job`` may change the render
    (the tests plant their breaks through it)."""
    if os.geteuid() != 0:
        raise CouldNotRehearse("the rehearsal needs root here (mount, network and PID namespaces, setpriv)")
    for tool in ("unshare", "setpriv", "chroot", "ip"):
        if shutil.which(tool) is None:
            raise CouldNotRehearse(f"{tool} is not installed (util-linux, coreutils, iproute2)")
    one = replace(outs, nodes=1)
    run_id = vjob.new_run_id()
    rendered, said = _render(one, args, run_id)
    if break_job is not None:
        break_job(rendered)
    if args.stage_dir:
        Path(args.stage_dir).mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="gpuc-rehearse-", dir=args.stage_dir))
    try:
        if rendered.jobset is not None:
            jobset = rendered.jobset
            d = from_jobset(jobset, rendered.configmap, stage, stack_configmaps(outs))
        else:
            d = from_sbatch(rendered.files["validate.sbatch"], one, rendered.run_dir, stage)
        d.said[:0] = said
        from gpu_cluster.workloads.launch.fabric import wiring

        wired = wiring(outs.fabric.type)
        link_layer = (wired.pod if d.kind == "kubernetes" else wired.slurm).ib_hca_link_layer
        if link_layer and "NCCL_IB_HCA" not in d.env:
            # This machine has no HCA whose port reads InfiniBand: the job is given the variable its
            # start-up discovery would set, which then skips it (workloads/launch/fabric.py
            # ib_hca_lines; the discovery itself is tested in tests/launch/test_nccl_topology.py).
            d.env["NCCL_IB_HCA"] = "=mlx5_0"
            d.said.append(
                f"stand-in: NCCL_IB_HCA==mlx5_0 (no HCA here whose port reads {link_layer}; discovery skipped)"
            )
        if getattr(args, "image_python", None):
            if d.kind != "kubernetes":
                raise CouldNotRehearse("--image-python stands in for a container image's interpreter (Kubernetes)")
            d.interpreter = image_interpreter(args.image_python)
        d.argv = [_fewer_ranks(a, args.ranks) for a in d.argv]
        if d.kind == "slurm":
            script = stage / "job.sbatch"
            script.write_text(_fewer_ranks(script.read_text(), args.ranks))
        return rehearse_declared(d, one, rendered.run_dir, stage, args.ranks, args.timeout)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", "--one-file-system", str(stage)], check=False)


def _fewer_ranks(text: str, ranks: int) -> str:
    """The rehearsal's one edit of the job's command: ``ranks`` ranks instead of one per GPU."""
    return re.sub(r"--nproc-per-node=\d+", f"--nproc-per-node={ranks}", text)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rehearse", help="run the stack's rendered job here, under what it declares, to its first collective"
    )
    p.add_argument("stack", help=STACK_HELP)
    p.add_argument("--outputs", type=Path, help="JSON from `pulumi stack output --json --show-secrets`")
    p.add_argument("--image", help="Kubernetes: the image to render (not pulled here)")
    p.add_argument("--python", help="Slurm: the job's interpreter (as for render/submit --python)")
    p.add_argument(
        "--image-python",
        help="Kubernetes: the interpreter that stands in for the image's, e.g. a virtualenv holding the "
        "image's own torch (default: this project's; the report says which torch ran)",
    )
    p.add_argument("--ranks", type=int, choices=(1, 2), default=2, help="ranks on the one node (default 2)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the job may take to its first collective")
    p.add_argument("--keep", action="store_true", help="keep the stand-in tree and the job's log")
    p.add_argument("--stage-dir", help="where the stand-in tree is made (default: the system's temp dir)")


def run(args: argparse.Namespace, say: Callable[[str], None] = print) -> int:
    from gpu_cluster.components.contract import OutputsError
    from gpu_cluster.workloads.launch.common import LaunchSpecError
    from gpu_cluster.workloads.validate import commands

    try:
        loaded = commands.load(args.stack, args.outputs, allow_plan=True)
        say(f"outputs: {loaded.source}")
        # The whole job, as render writes it, must be able to run on the cluster before one node of
        # it is rehearsed here: a rehearsal that passes says nothing about a pod that stays Pending.
        full, _ = _render(loaded.outputs, args, vjob.new_run_id())
        if not commands.ready_to_run(loaded, full, args.stack, say):
            say(f"not rehearsed: {args.stack} is not ready (liveness does not hold)")
            return EXIT_FAIL
        outcome = rehearse(loaded.outputs, args)
    except (CouldNotRehearse, OutputsError, commands.CommandError, LaunchSpecError) as exc:
        print(f"validate rehearse: could not rehearse {args.stack}: {exc}", file=sys.stderr)
        return EXIT_COULD_NOT
    for line in outcome.lines:
        say(line)
    return outcome.code
