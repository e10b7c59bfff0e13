#!/usr/bin/env bash
# One short pass on a GPU machine: which GPU, the node gate (NVML counters, DCGM when present,
# a sustained GEMM against the model's floor), per-GPU health, the DDP job's MFU, the collectives
# sweep to 8 GiB (the size the floors are stated at) on NCCL with its CUDA-event path, and the
# harness-versus-bare ratio. About ten minutes on one 8-GPU node.
#
#   bench/gpu.sh [INSTANCE_TYPE]     e.g. bench/gpu.sh p5.48xlarge
#
# With an instance type, gpu_health judges against the catalog (its GPU count too, so give one
# only on that very machine) and ddp_train takes its MFU peak from it; without one, set
# PEAK_TFLOPS for the MFU. Files land in $OUT (default: a fresh temporary directory).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3

PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
IT=${1:-${INSTANCE_TYPE:-}}
mkdir -p "$OUT"

names=$(nvidia-smi --query-gpu=name --format=csv,noheader) || { echo "nvidia-smi failed: no GPU here" >&2; exit 3; }
NGPU=$(printf '%s\n' "$names" | wc -l)
echo "== GPU: $NGPU x $(printf '%s\n' "$names" | sort -u | paste -sd ',')"
RUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$NGPU")
status=0

echo "== node gate (NVML, DCGM if installed, ${GEMM_SECONDS:-30} s sustained GEMM)"
"$PY" -m gpu_cluster.workloads.health.node_gate ${IT:+--instance-type "$IT"} --gemm-seconds "${GEMM_SECONDS:-30}" \
    --json "$OUT/gate.json" || status=1

echo "== gpu_health (bf16 matmul, copy bandwidth, GPU count)"
"${RUN[@]}" -m gpu_cluster.workloads.health.gpu ${IT:+--instance-type "$IT"} --json "$OUT/health.json" || status=1

echo "== ddp_train (50 steps, MFU)"
peak=()
if [[ -n "$IT" ]]; then peak=(--instance-type "$IT"); elif [[ -n "${PEAK_TFLOPS:-}" ]]; then peak=(--peak-tflops "$PEAK_TFLOPS"); fi
"$PY" -m gpu_cluster.workloads.train.data write-synthetic --out "$OUT/data" --shards 2 --tokens-per-shard 4000000 \
    --vocab 32000 --seed 0 || status=1
"${RUN[@]}" -m gpu_cluster.workloads.train --data "$OUT/data/train-*.bin" --steps 50 --vocab-size 32000 \
    --seq-len 1024 --d-model 1024 --n-layers 8 --n-heads 16 --batch-size 8 --log-every 10 \
    "${peak[@]}" --json "$OUT/ddp.json" || status=1

echo "== collectives (host timer + CUDA events), all ops, 1M..8G (capped to GPU memory as nccl-tests does)"
"${RUN[@]}" -m gpu_cluster.workloads.collectives -o all -b 1M -e 8G -f 2 -n 20 -w 5 \
    --json "$OUT/collectives.json" || status=1

echo "== harness vs bare all_reduce on NCCL (judged against its own control)"
"$PY" -m bench.collectives_overhead --gpu --nproc "$NGPU" --rounds 10 --iters 10
rc=$?; [[ $rc -eq 1 || $rc -eq 3 ]] && status=1

echo "== results in $OUT (exit $status)"
exit "$status"
