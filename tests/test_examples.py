"""examples/: the library example under the offline engine (its own test file, also run by
tests/test_packaging.py against the installed package)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _example_test():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("example_test_program", ROOT / "examples/python/test_program.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_library_example() -> None:
    example = _example_test()
    # The example's own test holds everything it shows (caller's provider, caller's VPC, outputs) ...
    example.test_library_example_uses_the_callers_provider_and_vpc()
    # ... and the two claims the README makes of it are held here too, so this test fails by itself.
    run = example.example_run()
    assert [r.name for r in run.resources if r.type == "pulumi:providers:aws"] == ["deploy"]
    assert not [r for r in run.resources if r.type in ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet")]
    assert run.outputs["gpu_cluster"]["orchestrator"] == "eks"
