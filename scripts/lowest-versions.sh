#!/usr/bin/env bash
# The package tests on the lowest tested set (constraints-lowest.txt), in a virtualenv of its own:
# the component, its spec, its schema and the library example, with pulumi and the providers at
# each range's floor. Not part of `make test` (it downloads the providers again, a few hundred MB);
# `make lowest` runs it. Usage: scripts/lowest-versions.sh [VENV_DIR]
#        scripts/lowest-versions.sh --resolve-only PYTHON   (cheap: pip resolves pyproject's core
#        and the clouds' extras' ranges with constraints-lowest.txt pinned, metadata only; `make test` runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--resolve-only" ]; then
  py="${2:?--resolve-only PYTHON}"
  reqs="$(mktemp)"
  trap 'rm -f "$reqs"' EXIT
  # The ranges themselves, not `.`: building the project's metadata here would leave an egg-info
  # in the checkout.
  # The core and the clouds' extras ([aws], [gcp], [azure]): constraints-lowest.txt holds their floors.
  "$py" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; o = p["optional-dependencies"]; print("\n".join(p["dependencies"] + o["aws"] + o["gcp"] + o["azure"]))' >"$reqs"
  "$py" -m pip install -q --dry-run --ignore-installed -r "$reqs" -c constraints-lowest.txt
  echo "the lowest tested set resolves with pyproject's ranges"
  exit 0
fi
venv="${1:-.venv-lowest}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# pytest, hypothesis and kubernetes-validate at requirements.txt's pins: the test tools, not what is under test.
"$venv/bin/python" -m pip install -q -r constraints-lowest.txt \
  "$(grep "^pytest==" requirements.txt)" "$(grep "^hypothesis==" requirements.txt)" \
  "$(grep "^kubernetes-validate==" requirements.txt)"
"$venv/bin/python" -m pip check
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
pins = dict(line.split("==") for line in open("constraints-lowest.txt") if "==" in line and not line.startswith("#"))
got = {name: version(name) for name in pins}
wrong = {n: (got[n], v.strip()) for n, v in pins.items() if got[n] != v.strip()}
assert not wrong, f"not the lowest set: {wrong}"
print("lowest set installed:", ", ".join(f"{n}=={v}" for n, v in got.items()))
PY
# The checkout on PYTHONPATH, as the project's tests run (an editable install would leave a
# gpu_cluster.egg-info here, which pip then takes for an installed gpu-cluster).
PYTHONPATH="$PWD" PULUMI_ERROR_OUTPUT_STRING=1 "$venv/bin/python" -m pytest -q -x -p no:cacheprovider \
  tests/components/test_spec.py tests/components/test_component_args.py \
  tests/components/test_component_schema.py tests/test_examples.py tests/components/aws tests/components/gcp
