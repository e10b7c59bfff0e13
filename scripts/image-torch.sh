#!/usr/bin/env bash
# `make image-torch`: the job's tests on the torch of the NVIDIA Kubernetes jobs' image, not only
# on the torch CI tests (requirements.txt). The image is the catalog's runtime_images.cuda (NGC);
# its torch is a pre-release build of a line, so the tests run on that line's release
# (`tested_on` in the catalog), CPU, in a virtualenv of its own: $VENV (default .venv-image-torch).
#
#   1. tests/workloads (every job package: collectives, health, train, parallel, tasks, validate)
#   2. the local validation (two torchrun agents, gloo), as `make validate-local` runs it
#   3. the rehearsal of gcp-h100-gke's rendered job with that interpreter standing in for the
#      image's (needs root, as every rehearsal does; skipped with a line otherwise)
#
# Usage: scripts/image-torch.sh [PY]   (PY: the project's interpreter, default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
VENV=${VENV:-.venv-image-torch}

read -r image torch release < <("$PY" -c '
from gpu_cluster.components.catalog import load_runtime_images
img = load_runtime_images()["cuda"]
print(img.repository + ":" + img.tag, img.torch, img.tested_on or img.torch)')
echo "image $image carries torch $torch: testing on torch $release (CPU) in $VENV"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$release')" 2>/dev/null; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # The CPU wheel where PyTorch's own index answers (about 200 MB); else PyPI's (CUDA, several GB).
    "$VENV/bin/python" -m pip install -q "torch==$release" --index-url https://download.pytorch.org/whl/cpu \
        || "$VENV/bin/python" -m pip install -q "torch==$release"
    # Everything else at requirements.txt's pins, torch left as installed.
    grep -v '^torch==' requirements.txt > "$VENV/requirements-but-torch.txt"
    "$VENV/bin/python" -m pip install -q -r "$VENV/requirements-but-torch.txt"
fi
"$VENV/bin/python" -c "import torch; print('torch', torch.__version__, 'in', '$VENV')"

rc=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/workloads || rc=$?
echo "tests/workloads on torch $release: exit $rc"

out=out/image-torch
rm -rf "$out/validate-local"
v=0
"$VENV/bin/python" -m gpu_cluster.workloads.validate --local --out "$out/validate-local" || v=$?
# The verdict (0 pass, 1 warn, 2 fail) is the validation's answer; 3 means it could not run.
echo "validate --local on torch $release: verdict exit $v"
[ "$v" -le 2 ] || rc=$v

if [ "$(id -u)" = 0 ]; then
    r=0
    "$PY" -m gpu_cluster.workloads.validate rehearse gcp-h100-gke --image-python "$VENV/bin/python" || r=$?
    echo "rehearse gcp-h100-gke on torch $release: exit $r"
    [ "$r" = 0 ] || rc=$r
else
    echo "rehearse gcp-h100-gke: skipped (a rehearsal needs root)"
fi
exit "$rc"
