"""The house a newcomer reads in one pass: no product file longer than :data:`MAX_LINES`, and every
product package in the wheel.

Product code is every Python file outside ``tests/``: the packages (``components``, ``workloads``,
``policies``, ``gpu_cluster``), the Pulumi entry points (``__main__.py``, ``provider/``) and what
users run or copy (``bench/``, ``examples/``, ``scripts/``). Tests are left out: a test module is a
list of cases, read one case at a time. Data files (``catalog.yaml``) are left out: they are read
by entry, and each entry carries its source.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 650
PACKAGES = ("components", "workloads", "policies", "gpu_cluster")


def product_files(root: Path = ROOT) -> list[Path]:
    """The tracked Python files outside ``tests/`` (untracked ones too, so a new file counts before
    its first commit; ignored ones, such as a virtualenv, do not)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [root / p for p in listed if not p.startswith("tests/") and (root / p).is_file()]


def too_long(files: list[Path], root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    out = []
    for path in files:
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{path.relative_to(root)}: {n} lines (at most {limit}: split it by what each part does)")
    return out


def test_no_product_file_is_over_the_limit() -> None:
    files = product_files()
    assert any(p.name == "plan.py" for p in files) and not any("tests" in p.relative_to(ROOT).parts for p in files)
    assert not too_long(files)


def test_a_long_file_is_named_with_its_length(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * 650)
    (tmp_path / "long.py").write_text("x = 1\n" * 651)
    got = too_long(sorted(tmp_path.glob("*.py")), root=tmp_path)
    assert got == ["long.py: 651 lines (at most 650: split it by what each part does)"]


def test_every_product_package_is_in_the_wheel() -> None:
    """pyproject lists its packages (tests/, bench/ and the rest stay out): a package split into a
    subpackage must be listed too, or an installed copy would miss it."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    # each package's folder in the checkout (package-dir: components/ is gpu_cluster.components)
    folders = {pkg: Path(folder) for pkg, folder in setuptools["package-dir"].items()}
    found = {
        ".".join((name, *init.parent.relative_to(ROOT / folder).parts))
        for name, folder in folders.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    # a package of data alone (the bundled stacks) has no __init__.py
    found |= {name for name, folder in folders.items() if not (ROOT / folder / "__init__.py").exists()}
    assert set(folders) <= listed
    assert found - listed == set(), f"packages missing from pyproject's [tool.setuptools] packages: {found - listed}"
    assert listed - found == set(), f"pyproject lists packages that do not exist: {listed - found}"
