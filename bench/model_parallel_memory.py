"""What each rank holds at its peak under FSDP2, tensor parallel, 2-D and the pipeline, beside one device.

    python -m bench.model_parallel_memory [--ranks 4] [--tp 2] [--d-model 256] [--n-layers 8]
                                          [--budget-frac 0.4] [--steps 3]

First this process trains the whole model on one device and measures its peak of everything
(parameters, gradients, AdamW's two moments, activations: :mod:`gpu_cluster.workloads.parallel.memory`,
live tensor storages on CPU). Then one torchrun launch of ``gpu_cluster.workloads.parallel.run`` (CPU,
gloo, one thread per rank) runs every split mode one after the other on the same ranks, each
building the model on the meta device and materialising only its own shards, under a per-rank
memory budget of ``--budget-frac`` of that one-device peak (so the model does not fit the
budget on one device) and with the one-process reference check. The table gives, per mode and
rank, the training peak and its parts, and the largest rank's peak as a fraction of the
one-device peak; then whether each mode stayed within the budget and matched the reference.
Memory figures do not depend on the machine's load; the times printed are only for orientation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODES = ("fsdp", "tp", "2d", "pipeline", "pipeline-1f1b")
MIB = 1 << 20


def shape_args(args: argparse.Namespace) -> list[str]:
    return [
        "--vocab-size",
        str(args.vocab_size),
        "--seq-len",
        str(args.seq_len),
        "--d-model",
        str(args.d_model),
        "--n-layers",
        str(args.n_layers),
        "--n-heads",
        str(args.n_heads),
        "--batch-size",
        str(args.batch_size),
        "--microbatches",
        str(args.ranks),
        "--steps",
        str(args.steps),
        "--seed",
        "0",
    ]


def one_device_peak(args: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import asdict

    from gpu_cluster.workloads.parallel.run import parse_config, run_reference_measured

    _, peak = run_reference_measured(parse_config(["--mode", "reference", *shape_args(args)]))
    assert peak is not None
    return asdict(peak)


def launch(args: argparse.Namespace, budget: int, out: Path) -> dict[str, Any]:
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        GPUC_FORCE_CPU="1",
        OMP_NUM_THREADS="1",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={args.ranks}",
        "-m",
        "gpu_cluster.workloads.parallel.run",
        "--mode",
        ",".join(MODES),
        "--tp",
        str(args.tp),
        *shape_args(args),
        "--precision",
        "fp32",
        "--memory-budget-mib",
        f"{budget / MIB:.6f}",
        "--check-reference",
        "--json",
        str(out),
    ]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if not out.exists():
        sys.exit(f"model_parallel failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.model_parallel_memory")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tp", type=int, default=2, help="tensor-parallel degree of the 2-D run")
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=8)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument(
        "--budget-frac", type=float, default=0.4, help="per-rank budget as a fraction of the one-device peak"
    )
    args = ap.parse_args()
    one = one_device_peak(args)
    budget = int(args.budget_frac * one["total"])
    with tempfile.TemporaryDirectory(prefix="mp-bench-") as tmp:
        m = launch(args, budget, Path(tmp) / "mp.json")
    full, world = m["full_model_param_bytes"], m["world_size"]
    md = m["model"]
    print(
        f"model_parallel memory, CPU gloo, {world} ranks (2-D: dp {world // args.tp} x tp {args.tp}): "
        f"GPT d_model {md['d_model']}, {md['n_layers']} layers, vocab {md['vocab_size']}, batch {args.batch_size} "
        f"x {md['seq_len']}, {full // 4:,} parameters = {full / MIB:.3f} MiB fp32, AdamW"
    )
    print(
        f"one device: peak {one['total'] / MIB:.3f} MiB = params {one['params'] / MIB:.3f} + grads "
        f"{one['grads'] / MIB:.3f} + optimizer {one['optimizer'] / MIB:.3f} + activations "
        f"{one['activations'] / MIB:.3f} + other {one['other'] / MIB:.3f} (measured here, live tensor storages)"
    )
    print(
        f"budget {budget / MIB:.3f} MiB per rank = {args.budget_frac:.0%} of the one-device peak: "
        f"the model {'does not fit' if one['total'] > budget else 'FITS'} the budget on one device "
        f"(its peak is {one['total'] / budget:.2f}x the budget)"
    )
    if m["one_device_peak"] and m["one_device_peak"]["total"] != one["total"]:
        print(f"  (the job's own one-device measurement: {m['one_device_peak']['total'] / MIB:.3f} MiB)")
    ranks = " ".join(f"{'rank ' + str(r):>9}" for r in range(world))
    print(f"{'mode':<14} {'peak part (MiB)':<18} {ranks} {'max/1-dev':>9}")
    parts = (
        ("peak_total", "training peak"),
        ("peak_params", "  params"),
        ("peak_grads", "  grads"),
        ("peak_optimizer", "  optimizer"),
        ("peak_activations", "  activations"),
        ("peak_other", "  other"),
        ("params_peak_materialise", "materialising"),
    )
    for run in m["runs"]:
        for key, label in parts:
            vals = [row[key] for row in run["per_rank"]]
            cells = " ".join(f"{v / MIB:>9.3f}" for v in vals)
            print(
                f"{run['mode'] if key == 'peak_total' else '':<14} {label:<18} {cells} {max(vals) / one['total']:>9.3f}"
            )
    print("per mode: largest rank's peak / one-device peak | within budget | max relative loss difference | time")
    for run in m["runs"]:
        print(
            f"  {run['mode']:<14} {run['peak_fraction']:.3f}  {'yes' if run['within_budget'] else 'NO':<4} "
            f"{run['max_rel_diff']:.2e} ({'match' if run['match'] else 'MISMATCH'}, rtol {m['loss_rtol']})  "
            f"{run['elapsed_s']:.1f} s"
        )
    ok = m["match"] is True and all(run["within_budget"] for run in m["runs"]) and one["total"] > budget
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
