#!/usr/bin/env bash
# What each install of gpu-cluster puts on disk: the core alone, the core with one cloud's extra
# ([aws], [gcp], [azure]), and the core as it was at BASE (before the per-cloud extras, when AWS's
# and GCP's SDKs were both core). Each is a real `pip install` from the package registry into a
# fresh virtualenv, at requirements.txt's pins (the tested set); the size is what the install added
# to the virtualenv's site-packages (du, in MB of 10^6 bytes). Not in `make bench`: it downloads
# a few hundred MB the first time (pip's cache serves the rest). Usage:
#   bash bench/install_size.sh [BASE]        (BASE: a commit, default the merge base with main)
# It writes what it prints to bench/results/install-size.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:-$(git merge-base HEAD main)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# requirements.txt as constraints (pip refuses a constraint with extras: moto[server] goes).
grep -E '^[A-Za-z0-9_.-]+==' requirements.txt >"$work/constraints.txt"

wheel_of() { # $1: a directory holding a tree; $2: where the wheel goes
  python3 -m pip wheel -q --no-deps --disable-pip-version-check -w "$2" "$1" >/dev/null
  ls "$2"/gpu_cluster-*.whl
}

# This tree as committed plus what is changed (tracked files only), and BASE's, each built away
# from the checkout so no build/ or egg-info is left in it.
mkdir -p "$work/now" "$work/base"
git ls-files -z | xargs -0 cp --parents -t "$work/now"
git archive "$base" | tar -x -C "$work/base"
now_whl="$(wheel_of "$work/now" "$work/dist-now")"
base_whl="$(wheel_of "$work/base" "$work/dist-base")"

size_of() { # $1: label; $2: what to pip install
  local venv="$work/venv-$1"
  python3 -m venv "$venv"
  local site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  local before after
  before="$(du -sb "$site" | cut -f1)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$work/constraints.txt" "$2" >/dev/null
  after="$(du -sb "$site" | cut -f1)"
  local sdks
  sdks="$("$venv/bin/python" -m pip list --disable-pip-version-check --format=freeze 2>/dev/null |
    grep -iE '^pulumi' | cut -d= -f1 | paste -sd' ')"
  printf '%-28s %6d MB   %s\n' "$1" "$(((after - before) / 1000000))" "$sdks"
  rm -rf "$venv"
}

table() {
  echo "gpu-cluster install sizes, $(date -u +%Y-%m-%d), python $(python3 -c 'import platform; print(platform.python_version())'), pins of requirements.txt"
  printf '%-28s %9s   %s\n' "install" "size" "pulumi packages"
  size_of "before ($(git rev-parse --short "$base")) core" "$base_whl"
  size_of "core" "$now_whl"
  size_of "core+[aws]" "${now_whl}[aws]"
  size_of "core+[gcp]" "${now_whl}[gcp]"
  size_of "core+[azure]" "${now_whl}[azure]"
}

# The table is printed and recorded: docs/library.md and README.md print the recorded one, and
# tests/test_docs.py holds them to it.
table | tee bench/results/install-size.txt
