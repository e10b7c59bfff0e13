"""Run under torchrun with 4 ranks by test_model_parallel: build the GPT on meta, apply each
parallelism, materialise the local shards, and compare every parameter, gathered, with the
one-process model initialised the same way. Rank 0 writes
``{mode: {"mismatched": [names], "placements": [str], "local_bytes": int, "full_bytes": int}}``
to argv[1] (mismatches from every rank; ``local_bytes`` rank 0's)."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from gpu_cluster.workloads.runtime import device
from gpu_cluster.workloads.train.model import GPT, GPTConfig
from gpu_cluster.workloads.parallel import plans
from gpu_cluster.workloads.parallel.materialise import init_local, materialise, meta_model

# Deliberately uneven sizes (60 rows over 4 ranks, 10 positions over 4): padded FSDP shards.
CFG = GPTConfig(vocab_size=60, seq_len=10, d_model=48, n_layers=4, n_heads=4, tie_weights=False)
SEED = 11


def main(path: str) -> None:
    rt = device.setup(timeout_s=120)
    full = GPT(CFG)
    init_local(full, CFG, SEED)
    ref = dict(full.named_parameters())
    out: dict[str, object] = {}
    for mode in ("fsdp", "tp", "2d", "pipeline"):
        model = meta_model(CFG)
        if mode == "fsdp":
            plans.apply_fsdp(model, init_device_mesh("cpu", (rt.world_size,)), bf16=False)
        elif mode == "tp":
            plans.apply_tp(model, init_device_mesh("cpu", (rt.world_size,)))
        elif mode == "2d":
            mesh = plans.mesh_2d("cpu", rt.world_size, 2)
            plans.apply_tp(model, mesh["tp"])
            plans.apply_fsdp(model, mesh["dp"], bf16=False)
        else:
            plans.pipeline_part(model, rt.rank, rt.world_size)
        res = materialise(model, CFG, SEED, torch.device("cpu"))
        mismatched = []
        placements = set()
        for name, p in model.named_parameters():
            whole = p.full_tensor() if isinstance(p, DTensor) else p
            placements.add(str(getattr(p, "placements", "plain")))
            if not torch.equal(whole.detach(), ref[name].detach()):
                mismatched.append(name)
        every: list[list[str] | None] = [None] * rt.world_size
        dist.all_gather_object(every, mismatched)  # a pipeline rank checks only the parts it owns
        out[mode] = {
            "mismatched": sorted({n for names in every for n in names or []}),
            "placements": sorted(placements),
            "local_bytes": res.materialised,
            "full_bytes": sum(p.nbytes for p in full.parameters()),
        }
    if rt.is_main:
        with open(path, "w") as f:
            json.dump(out, f)
    device.teardown()


if __name__ == "__main__":
    main(sys.argv[1])
    device.exit_process(0)
