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
    _example_test().test_library_example_uses_the_callers_provider_and_vpc()
