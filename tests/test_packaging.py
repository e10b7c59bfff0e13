"""The package as a user gets it: a wheel built from this tree holds every package and the catalog,
and, installed into a fresh virtualenv, imports and finds its data without the repository on sys.path.

The wheel is built from a copy of the tree (``pip wheel --no-deps --no-build-isolation --no-index``
with the setuptools of the running virtualenv: offline, and no ``build/`` or ``*.egg-info`` left in
the checkout, nor a stale ``build/lib`` from an earlier run leaking into the wheel).

The fresh virtualenv is made from the base interpreter (``venv --without-pip``) and the wheel is
installed into it with ``--no-deps``. Its dependencies (pulumi, torch, ...) come from the running
virtualenv's site-packages through a ``.pth`` file: ``--system-site-packages`` would not do, since
it exposes the base interpreter's site-packages, not this virtualenv's. The ``.pth`` entries come
after the fresh site-packages on sys.path, so ``components`` can only be found there, and the probe
runs isolated (``-I``: no PYTHONPATH, no user site, no script directory) from an empty directory,
then checks where every module was loaded from.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("components", "workloads", "policies", "gpu_cluster")
NOT_PACKAGES = ("tests", "bench", "stacks", "scripts", "docs", "examples")
DATA = ("components/catalog.yaml",)
_COPY_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.pyc",
    "build",
    "dist",
    "*.egg-info",
    ".mypy_cache",
    ".pytest_cache",
    ".hypothesis",
    "out",
)


def _source_packages() -> list[str]:
    return sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in PACKAGES
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def _source_modules() -> list[str]:
    """Every .py file of the packages, as a path in the wheel."""
    return sorted(
        str(py.relative_to(ROOT).as_posix())
        for pkg in _source_packages()
        for py in (ROOT / pkg.replace(".", "/")).glob("*.py")
    )


def _run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist = tmp / "src", tmp / "dist"
    shutil.copytree(ROOT, src, ignore=_COPY_IGNORE)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(dist),
        ]
    )
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    assert wheels[0].name.startswith("gpu_cluster-") and wheels[0].name.endswith("-py3-none-any.whl")
    return wheels[0]


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def _dist_info(wheel: Path) -> str:
    (info,) = {n.split("/")[0] for n in _names(wheel) if n.split("/")[0].endswith(".dist-info")}
    return info


def test_wheel_holds_every_package_and_the_data(wheel: Path) -> None:
    names = set(_names(wheel))
    assert {n.split("/")[0] for n in names} == {*PACKAGES, _dist_info(wheel)}
    assert not {n for n in names if n.split("/")[0] in NOT_PACKAGES or "/" not in n}, "stray top-level files"
    assert len(_source_packages()) >= 8
    for pkg in _source_packages():
        assert f"{pkg.replace('.', '/')}/__init__.py" in names, f"package {pkg} missing from the wheel"
    assert not set(_source_modules()) - names, "modules missing from the wheel"
    with zipfile.ZipFile(wheel) as z:
        for data in DATA:
            assert z.read(data) == (ROOT / data).read_bytes(), data
        assert z.read(f"{_dist_info(wheel)}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()


def _requirements() -> tuple[dict[str, str], dict[str, str]]:
    """requirements.txt's pins: (all of them, the test and type-check tools at its end)."""
    pins: dict[str, str] = {}
    tools: dict[str, str] = {}
    in_tools = False
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            in_tools = in_tools or "test and type-check tools" in line
            continue
        if line.strip():
            name, version = line.split("==")
            name = name.split("[")[0].lower()  # moto[server]: the distribution is moto
            pins[name] = version
            if in_tools:
                tools[name] = version
    return pins, tools


EXTRAS = {"aws", "gcp", "azure", "validate", "preflight", "tasks", "policy", "dev"}
# Each cloud's SDKs are its extra (bench/install_size.sh measures each): an AWS-only user carries only AWS's.
CORE = {"pulumi", "pulumi-kubernetes", "pyyaml"}


def _lowest() -> dict[str, str]:
    """constraints-lowest.txt: the lowest set the package tests ran on."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints-lowest.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_wheel_metadata_declares_ranges_core_and_extras(wheel: Path) -> None:
    """A library's metadata: ranges (floor = the lowest tested, requirements.txt's pin inside),
    a core of the component and what `pulumi up` needs, the rest in extras."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    with zipfile.ZipFile(wheel) as z:
        meta = email.parser.Parser().parsestr(z.read(f"{_dist_info(wheel)}/METADATA").decode())
    assert meta["Name"] == "gpu-cluster" and meta["Version"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "Apache-2.0"
    assert set(meta.get_all("Provides-Extra") or []) == EXTRAS
    by_extra: dict[str, dict[str, Requirement]] = {"": {}}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        extra = next((e for e in EXTRAS if req.marker and req.marker.evaluate({"extra": e})), "")
        by_extra.setdefault(extra, {})[req.name.lower()] = req
    core = by_extra[""]
    assert set(core) == CORE, "the core is the component and what `pulumi up` needs"
    assert {"torch", "boto3", "pytest", "matplotlib", "s3fs", "pulumi-azure-native"}.isdisjoint(core)
    assert set(by_extra["azure"]) == {"pulumi-azure-native"}
    assert set(by_extra["aws"]) == {"pulumi-aws", "pulumi-aws-native"}
    assert set(by_extra["gcp"]) == {"pulumi-gcp"}
    assert {"torch", "matplotlib", "kubernetes"} <= set(by_extra["validate"])
    assert {"boto3", "google-cloud-compute"} <= set(by_extra["preflight"])
    assert {"s3fs", "gcsfs"} <= set(by_extra["tasks"])
    assert by_extra["dev"]["gpu-cluster"].extras == EXTRAS - {"dev"}
    pins, tools = _requirements()
    declared = {n: r for reqs in by_extra.values() for n, r in reqs.items() if n != "gpu-cluster"}
    assert set(declared) == set(pins), "every pin of requirements.txt is declared, and nothing else"
    assert set(tools) <= set(by_extra["dev"]), "the test tools go in the 'dev' extra"
    for name, req in {**core, **by_extra["aws"], **by_extra["gcp"], **by_extra["azure"]}.items():
        # a range, not a pin: its floor is the lowest tested, and the pinned (highest tested) is inside
        assert not any(s.operator == "==" for s in req.specifier), f"{req} pins its users"
        (floor,) = [s.version for s in req.specifier if s.operator == ">="]
        assert any(s.operator == "<" for s in req.specifier), f"{req} has no ceiling"
        assert _lowest()[name] == floor, f"{name}: floor {floor} is not the lowest tested"
        assert Version(pins[name]) in req.specifier and Version(floor) in req.specifier
    for name, req in declared.items():
        assert Version(pins[name]) in req.specifier, f"{name}=={pins[name]} (the pinned set) outside {req}"


def test_a_lower_provider_inside_the_range_resolves(tmp_path: Path) -> None:
    """The issue's check: `pip install pulumi-aws==<lower> .` no longer conflicts. Resolved from
    the wheel's own metadata (no network): the lowest tested set satisfies every range of the core
    and the clouds' extras."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    import tomllib

    project = tomllib.loads(text)["project"]
    extras = project["optional-dependencies"]
    core = [Requirement(r) for r in [*project["dependencies"], *extras["aws"], *extras["gcp"], *extras["azure"]]]
    lowest = _lowest()
    assert {r.name.lower() for r in core} <= set(lowest)
    for req in core:
        assert Version(lowest[req.name.lower()]) in req.specifier, f"{req} refuses {lowest[req.name.lower()]}"
    (aws,) = [r for r in core if r.name == "pulumi-aws"]
    assert Version(lowest["pulumi-aws"]) < Version(_requirements()[0]["pulumi-aws"])


def _fresh_venv(wheel: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(python, purelib) of a fresh virtualenv with the wheel installed and the deps on a .pth."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            str(wheel),
        ]
    )
    purelib = Path(
        _run([str(py), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    # The dependencies, from the virtualenv running this test (after purelib on the fresh one's sys.path).
    paths = sysconfig.get_paths()
    ours = dict.fromkeys([*site.getsitepackages(), paths["purelib"], paths["platlib"]])
    (purelib / "_gpu_cluster_test_deps.pth").write_text("".join(f"{p}\n" for p in ours), encoding="utf-8")
    return py, purelib


def test_installed_wheel_runs_the_library_example(wheel: Path, tmp_path: Path) -> None:
    """pip install of the wheel, then examples/python's own tests, away from the checkout."""
    py, purelib = _fresh_venv(wheel, tmp_path)
    work = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "examples" / "python", work / "example")
    (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    runner = (
        "import sys, pytest, components; from pathlib import Path\n"
        f"assert Path(components.__file__).resolve().is_relative_to(Path({str(purelib.resolve())!r})), components.__file__\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-W', 'ignore::DeprecationWarning', "
        "'example/test_program.py']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = _run([str(py), "-I", "-c", runner], cwd=work, env=env)
    assert "2 passed" in proc.stdout, proc.stdout  # the offline engine and the set_mocks recipe


def test_installed_wheel_works_without_the_repository(wheel: Path, tmp_path: Path) -> None:
    py, purelib = _fresh_venv(wheel, tmp_path)

    probe = r"""
import importlib, importlib.util, json, pkgutil, sys
import components, workloads, policies, gpu_cluster
mods = {}
for top in (components, workloads, policies, gpu_cluster):
    mods[top.__name__] = top.__file__
    for info in pkgutil.walk_packages(top.__path__, top.__name__ + "."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # __main__ modules run their program
            mods[info.name] = importlib.import_module(info.name).__file__
from gpu_cluster.components.catalog import CATALOG_PATH, load_catalog
print(json.dumps({"modules": mods, "catalog": str(CATALOG_PATH), "instances": sorted(load_catalog().names()),
                  "sys_path": sys.path, "found": [n for n in %r if importlib.util.find_spec(n)]}))
""" % (NOT_PACKAGES,)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = json.loads(_run([str(py), "-I", "-c", probe], cwd=elsewhere, env=env).stdout.splitlines()[-1])

    # Nothing of the checkout's sources is importable (the dependencies' virtualenv may live
    # inside it, as .venv does).
    assert not [
        p
        for p in out["sys_path"]
        if p and Path(p).resolve().is_relative_to(ROOT) and not Path(p).resolve().is_relative_to(ROOT / ".venv")
    ]
    installed = purelib.resolve()
    expected = {m[: -len(".py")].replace("/", ".").removesuffix(".__init__") for m in _source_modules()}
    assert set(out["modules"]) == {m for m in expected if not m.endswith(".__main__")}
    for name, file in out["modules"].items():
        assert Path(file).resolve().is_relative_to(installed / name.split(".")[0]), f"{name} loaded from {file}"
    assert Path(out["catalog"]).resolve() == installed / "components" / "catalog.yaml"
    from gpu_cluster.components.catalog import load_catalog

    assert out["instances"] == sorted(load_catalog().names()) and out["instances"]
    assert out["found"] == [], "not packages of gpu-cluster"
    # the console script of [project.scripts], run from elsewhere: the one command, its list
    helped = _run([str(py.parent / "gpu-cluster"), "--help"], cwd=elsewhere, env=env)
    assert "validate" in helped.stdout and "node-gate" in helped.stdout
