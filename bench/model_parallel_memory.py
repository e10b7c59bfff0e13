"""What each rank holds under FSDP2, tensor parallel, 2-D and the pipeline, beside the whole model.

    python -m bench.model_parallel_memory [--ranks 4] [--tp 2] [--d-model 256] [--n-layers 8]
                                          [--budget-frac 0.35] [--steps 3]

One torchrun launch of ``workloads.parallel.run`` (CPU, gloo, one thread per rank) runs every
split mode one after the other on the same ranks, each building the model on the meta device
and materialising only its own shards, with a per-rank parameter budget below the model's size
(``--budget-frac`` of it) and the one-process reference check. The table gives, per mode and
rank, the parameter bytes resident after materialisation and the peak while materialising
(shards plus the initialisation's scratch), as the job measured them, and the largest rank's
share of the full model; then each mode's largest relative loss difference from the reference.
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


def launch(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], str]:
    from workloads.train.model import GPTConfig, total_params

    full = (
        total_params(
            GPTConfig(
                vocab_size=args.vocab_size,
                seq_len=args.seq_len,
                d_model=args.d_model,
                n_layers=args.n_layers,
                n_heads=args.n_heads,
                tie_weights=False,
            )
        )
        * 4
    )
    budget_mib = args.budget_frac * full / MIB
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
        "workloads.parallel.run",
        "--mode",
        ",".join(MODES),
        "--tp",
        str(args.tp),
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
        "--precision",
        "fp32",
        "--param-budget-mib",
        f"{budget_mib:.6f}",
        "--check-reference",
        "--json",
        str(out),
    ]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if not out.exists():
        sys.exit(f"model_parallel failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return json.loads(out.read_text()), r.stdout


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
    ap.add_argument("--budget-frac", type=float, default=0.35, help="per-rank budget as a fraction of the model")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mp-bench-") as tmp:
        m, _ = launch(args, Path(tmp) / "mp.json")
    full, budget, world = m["full_model_param_bytes"], m["param_budget_bytes"], m["world_size"]
    md = m["model"]
    print(
        f"model_parallel memory, CPU gloo, {world} ranks (2-D: dp {world // args.tp} x tp {args.tp}): "
        f"GPT d_model {md['d_model']}, {md['n_layers']} layers, vocab {md['vocab_size']}, "
        f"{full // 4:,} parameters = {full / MIB:.3f} MiB fp32; budget {budget / MIB:.3f} MiB per rank "
        f"({args.budget_frac:.0%} of the model)"
    )
    ranks = " ".join(f"{'rank ' + str(r):>9}" for r in range(world))
    print(f"{'mode':<14} {'figure (MiB)':<22} {ranks} {'max/full':>9}")
    print(f"{'one process':<14} {'params resident':<22} {full / MIB:>9.3f}{'':>{10 * (world - 1)}} {1.0:>9.3f}")
    for run in m["runs"]:
        for key, label in (
            ("params_materialised", "params resident"),
            ("params_peak_materialise", "peak materialising"),
            ("optimizer_state", "optimizer state"),
        ):
            vals = [row[key] for row in run["per_rank"]]
            cells = " ".join(f"{v / MIB:>9.3f}" for v in vals)
            print(
                f"{run['mode'] if key == 'params_materialised' else '':<14} {label:<22} {cells} "
                f"{max(vals) / full:>9.3f}"
            )
    print("per mode: within budget | max relative loss difference from the one-process reference | time")
    for run in m["runs"]:
        print(
            f"  {run['mode']:<14} {'yes' if run['within_budget'] else 'NO':<4} {run['max_rel_diff']:.2e} "
            f"({'match' if run['match'] else 'MISMATCH'}, rtol {m['loss_rtol']})  {run['elapsed_s']:.1f} s"
        )
    ok = m["match"] is True and all(run["within_budget"] for run in m["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
