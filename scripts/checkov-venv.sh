#!/usr/bin/env bash
# Creates .venv-checkov (Checkov at the pin in requirements-checkov.txt) once, or again when the pin
# changes; prints the checkov path. Checkov's dependency pins conflict with pulumi's, so it gets a
# virtualenv of its own that the tests call as a program.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-checkov
stamp="$venv/.installed"
if [ -e "$stamp" ] && cmp -s requirements-checkov.txt "$stamp"; then
  echo "$venv/bin/checkov"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-checkov.txt >&2
"$venv/bin/checkov" --version >&2
cp requirements-checkov.txt "$stamp"
echo "$venv/bin/checkov"
