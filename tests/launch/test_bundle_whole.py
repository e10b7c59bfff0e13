"""The job's code must be whole on a node where gpu-cluster is not installed: every module the
bundle ships imports from the bundle alone (a ``gpu_cluster.components`` module it misses fails
there, at the judge step, not here), and the archive fits the ConfigMap that carries it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.workloads.launch import bundle as code_bundle

# kubernetes.io/docs/concepts/configuration/configmap: "The data stored in a ConfigMap cannot
# exceed 1 MiB."
CONFIGMAP_LIMIT = 1024 * 1024

# Run on the unpacked bundle with this virtualenv's interpreter (torch, PyYAML), but without what
# would find the checkout's files instead: the editable install's finder (it resolves any
# gpu_cluster.* name to the checkout, whatever the package's own path says) and the checkout on
# sys.path.
PROBE = r"""
import importlib, json, pathlib, sys
here = pathlib.Path(sys.argv[1]).resolve()
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                    and "editable" not in getattr(f, "__name__", "").lower()]
sys.path[:] = [str(here)] + [p for p in sys.path[1:] if "site-packages" in p or "lib/python" in p]
names = sorted(
    ".".join(p.relative_to(here).with_suffix("").parts).removesuffix(".__init__")
    for p in here.rglob("*.py") if p.name != "__main__.py"
)
out = {}
for name in names:
    try:
        mod = importlib.import_module(name)
        out[name] = str(pathlib.Path(mod.__file__).resolve())
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def test_every_module_of_the_bundle_imports_from_the_bundle_alone(tmp_path: Path) -> None:
    names = code_bundle.unpack(code_bundle.build().data, tmp_path)
    assert "gpu_cluster/components/stack_locate.py" in names  # the judge's command module needs it
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert len(found) > 100 and "gpu_cluster.workloads.validate.commands" in found
    broken = {
        n: f for n, f in found.items() if not Path(f).is_absolute() or not Path(f).is_relative_to(tmp_path.resolve())
    }
    assert not broken


def test_the_bundle_fits_its_configmap() -> None:
    data = code_bundle.build()
    assert len(data.base64) < CONFIGMAP_LIMIT, f"{len(data.base64)} bytes of base64"


def test_a_parse_the_ast_counter_race_spoils_is_tried_again_and_any_other_error_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPython 3.11's shared AST recursion count (gh-106905): a traceback formatted on another thread
    while the bundle parses a file raised this SystemError in a full test run. The parse is tried
    again; a different SystemError, or the race every time, is raised."""
    import ast

    bundle = code_bundle
    real = ast.parse
    spoiled = SystemError("AST constructor recursion depth mismatch (before=156, after=206)")
    calls: list[int] = []

    def flaky(text: str) -> ast.Module:
        calls.append(1)
        if len(calls) < 3:
            raise spoiled
        return real(text)

    monkeypatch.setattr(bundle.ast, "parse", flaky)
    assert isinstance(bundle._parse("import os\n"), ast.Module) and len(calls) == 3

    def always(text: str) -> ast.Module:
        raise spoiled

    monkeypatch.setattr(bundle.ast, "parse", always)
    with pytest.raises(SystemError, match="mismatch"):
        bundle._parse("import os\n")

    def other(text: str) -> ast.Module:
        raise SystemError("something else")

    monkeypatch.setattr(bundle.ast, "parse", other)
    with pytest.raises(SystemError, match="something else"):
        bundle._parse("import os\n")
