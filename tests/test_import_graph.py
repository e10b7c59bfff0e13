"""The one-way flow of shared/DESIGN.md and docs/architecture.md, held by reading every import in
the product: no module imports, even lazily or for type checking, a module that imports it back,
and no room of the house imports a room above it.

The rooms and what each may import are :data:`MAY_IMPORT`; a module belongs to the room whose
name is the longest prefix of its own. The only imports left out are those inside an
``if __name__ == "__main__":`` block: they run when the file is a script, never when it is
imported, and they are how an old ``python -m`` path hands over to the command above it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("components", "policies", "workloads", "gpu_cluster")

# The modules both sides share: the catalog with its bandwidth model, the validation-time model,
# the output contract and the one problem type. Pure: no Pulumi, no torch.
SHARED = (
    "gpu_cluster.components.catalog",
    "gpu_cluster.components.catalog_file",
    "gpu_cluster.components.catalog_fabrics",
    "gpu_cluster.components.contract",
    "gpu_cluster.components.bandwidth",
    "gpu_cluster.components.bandwidth_baseline",
    "gpu_cluster.components.bandwidth_confidence",
    "gpu_cluster.components.validation_time",
    "gpu_cluster.components.problems",
    "gpu_cluster.components.image_pins",
    "gpu_cluster.components.stack_locate",
    "gpu_cluster.components.nccl_topology",
)
# Shared packages: the package and every module in it. The liveness model reads the plan's
# resources and the rendered job as plain data, so the validation side can run it too.
SHARED_PACKAGES = ("gpu_cluster.components.liveness",)
_RUNTIME_UP = ("components.shared",)
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "components.shared": (),
    "components": ("components.shared",),
    "policies": ("components", "components.shared"),
    # The fabric start-up check imports nothing of workloads, so the runtime's setup can run it
    # before the process group forms (NCCL would otherwise fall back to sockets in silence).
    "gpu_cluster.workloads.health.fabric": _RUNTIME_UP,
    "gpu_cluster.workloads.runtime": ("gpu_cluster.workloads.health.fabric", *_RUNTIME_UP),
    "gpu_cluster.workloads.health": ("gpu_cluster.workloads.runtime", *_RUNTIME_UP),
    "gpu_cluster.workloads.train": ("gpu_cluster.workloads.runtime", *_RUNTIME_UP),
    "gpu_cluster.workloads.collectives": (
        "gpu_cluster.workloads.health",
        "gpu_cluster.workloads.runtime",
        *_RUNTIME_UP,
    ),
    "gpu_cluster.workloads.parallel": ("gpu_cluster.workloads.train", "gpu_cluster.workloads.runtime", *_RUNTIME_UP),
    # Sharded inference applies the parallel package's tensor-parallel plans (issue 27).
    "gpu_cluster.workloads.tasks": (
        "gpu_cluster.workloads.parallel",
        "gpu_cluster.workloads.train",
        "gpu_cluster.workloads.runtime",
        *_RUNTIME_UP,
    ),
    "gpu_cluster.workloads.launch": ("gpu_cluster.workloads.runtime", *_RUNTIME_UP),
    "gpu_cluster.workloads.validate": (
        "gpu_cluster.workloads.launch",
        "gpu_cluster.workloads.collectives",
        "gpu_cluster.workloads.health",
        "gpu_cluster.workloads.train",
        "gpu_cluster.workloads.runtime",
        *_RUNTIME_UP,
    ),
    # the package itself and the thin entries of the old ``python -m`` paths
    "workloads": (
        "gpu_cluster.workloads.validate",
        "gpu_cluster.workloads.launch",
        "gpu_cluster.workloads.collectives",
        "gpu_cluster.workloads.parallel",
        "gpu_cluster.workloads.tasks",
        "gpu_cluster.workloads.health",
        "gpu_cluster.workloads.train",
        "gpu_cluster.workloads.runtime",
        *_RUNTIME_UP,
    ),
    "gpu_cluster": ("*",),
}


def room_of(module: str) -> str:
    if module in SHARED or any(module == p or module.startswith(p + ".") for p in SHARED_PACKAGES):
        return "components.shared"
    best = ""
    for room in MAY_IMPORT:
        if (module == room or module.startswith(room + ".")) and len(room) > len(best):
            best = room
    if not best:
        raise AssertionError(f"{module} belongs to no room of MAY_IMPORT: give it one")
    return best


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_main_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    t = node.test
    names = {getattr(t.left, "id", None), *(getattr(c, "value", None) for c in t.comparators)}
    return "__name__" in names and "__main__" in names


def imports(source: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every import outside ``if __name__ == "__main__":`` blocks, as (module, names from it)."""
    found: list[tuple[str, tuple[str, ...]]] = []

    def visit(node: ast.AST) -> None:
        if _is_main_guard(node):
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, tuple(a.name for a in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def imported_names(source: str) -> set[str]:
    """Every module path an import names (``from P import n`` names ``P`` and ``P.n``)."""
    return {m for m, _ in imports(source)} | {f"{m}.{n}" for m, names in imports(source) for n in names}


def graph(root: Path = ROOT, packages: Iterable[str] = PRODUCT) -> dict[str, set[str]]:
    """module -> the product modules it imports (``from P import m`` of a submodule is an edge to
    ``P.m``; of a name, to ``P``)."""
    files = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    edges: dict[str, set[str]] = {}
    for mod, path in files.items():
        targets = set()
        for module, names in imports(path.read_text(encoding="utf-8")):
            submodules = {f"{module}.{n}" for n in names} & files.keys()
            targets |= submodules
            if module in files and len(submodules) < len(names) or not names and module in files:
                targets.add(module)
        edges[mod] = targets - {mod}
    return edges


def upward_edges(edges: Mapping[str, set[str]]) -> list[str]:
    bad = []
    for mod, targets in sorted(edges.items()):
        here = room_of(mod)
        allowed = MAY_IMPORT[here]
        for t in sorted(targets):
            there = room_of(t)
            # a room inside an allowed room (gpu_cluster.workloads.health.fabric in gpu_cluster.workloads.health) is allowed
            if (
                there != here
                and "*" not in allowed
                and not any(there == a or there.startswith(a + ".") for a in allowed)
            ):
                bad.append(f"{mod} -> {t} ({here} may import only {', '.join(allowed) or 'nothing of this project'})")
    return bad


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(_one_cycle(sorted(comp), edges))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def _one_cycle(comp: list[str], edges: Mapping[str, set[str]]) -> list[str]:
    """A path start -> ... -> start inside the component, for the message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & members):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_every_module_has_a_room() -> None:
    rooms = {mod: room_of(mod) for mod in graph()}
    assert rooms and set(rooms.values()) <= set(MAY_IMPORT)
    assert room_of("gpu_cluster.workloads.health.fabric") == "gpu_cluster.workloads.health.fabric" and room_of(
        "gpu_cluster.components.catalog"
    ) == ("components.shared")


def test_no_import_circle_anywhere() -> None:
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_room_imports_a_room_above_it() -> None:
    assert not upward_edges(graph())


def test_workloads_import_no_pulumi() -> None:
    pulumi = {
        f"{module_name(p)}: {name}"
        for p in sorted((ROOT / "workloads").rglob("*.py"))
        for name in imported_names(p.read_text(encoding="utf-8"))
        if name.split(".")[0].startswith("pulumi")
    }
    assert not pulumi


def test_shared_modules_import_no_pulumi_and_no_torch() -> None:
    paths = [ROOT / (mod.replace(".", "/") + ".py") for mod in SHARED]
    paths += [p for pkg in SHARED_PACKAGES for p in sorted((ROOT / pkg.replace(".", "/")).glob("*.py"))]
    assert len(paths) > len(SHARED)
    for path in paths:
        names = imported_names(path.read_text(encoding="utf-8"))
        bad = {n for n in names if n.split(".")[0] in ("torch", "workloads", "gpu_cluster") or n.startswith("pulumi")}
        assert not bad, f"{path.relative_to(ROOT)}: {sorted(bad)}"


def test_a_shared_package_is_a_shared_room() -> None:
    assert (
        room_of("gpu_cluster.components.liveness")
        == room_of("gpu_cluster.components.liveness.facts")
        == "components.shared"
    )
    assert room_of("components.livenessx") == "components"


def test_workloads_top_level_holds_only_thin_entries() -> None:
    """Every module of workloads/ sits in a job package; the top holds __init__ and old paths."""
    for p in sorted((ROOT / "workloads").glob("*.py")):
        if p.name == "__init__.py":
            continue
        code = [
            line
            for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith(("#", '"""')) and '"""' not in line
        ]
        assert len(code) <= 8, f"{p.name} is more than a thin entry ({len(code)} lines of code)"


def _plant(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return graph(tmp_path, packages=("components", "workloads"))


def test_a_planted_circle_fails_with_its_edges_named(tmp_path: Path) -> None:
    edges = _plant(
        tmp_path,
        {
            "workloads/__init__.py": "",
            "workloads/tasks/__init__.py": "",
            "workloads/tasks/a.py": "def f():\n    from gpu_cluster.workloads.tasks import b\n",
            "workloads/tasks/b.py": "from gpu_cluster.workloads.tasks.a import f\n",
            "workloads/tasks/c.py": "import gpu_cluster.workloads.tasks.b\n",
            "components/__init__.py": "",
            "components/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from components.y import Y\n",
            "components/y.py": "from components import x\n",
        },
    )
    found = cycles(edges)
    assert sorted(found) == [
        ["components.x", "components.y", "components.x"],
        ["gpu_cluster.workloads.tasks.a", "gpu_cluster.workloads.tasks.b", "gpu_cluster.workloads.tasks.a"],
    ]


@pytest.mark.parametrize(
    ("importer", "text", "named"),
    [
        (
            "components/plan.py",
            "from policies import offline\n",
            "gpu_cluster.components.plan -> gpu_cluster.policies.offline",
        ),
        (
            "workloads/health/gate.py",
            "from gpu_cluster.workloads.validate import judge\n",
            "gpu_cluster.workloads.health.gate -> ",
        ),
        (
            "workloads/runtime/dev.py",
            "import gpu_cluster.workloads.collectives.ops\n",
            "gpu_cluster.workloads.runtime.dev -> ",
        ),
        (
            "components/aws/x.py",
            "def f():\n    from gpu_cluster.workloads.launch import job\n",
            "gpu_cluster.components.aws.x -> ",
        ),
        (
            "workloads/launch/job.py",
            "from gpu_cluster.components.spec import ClusterSpec\n",
            "gpu_cluster.workloads.launch.job -> ",
        ),
    ],
)
def test_a_planted_upward_edge_fails_with_the_edge_named(tmp_path: Path, importer: str, text: str, named: str) -> None:
    files = {
        "components/__init__.py": "",
        "components/spec.py": "",
        "policies/__init__.py": "",
        "policies/offline.py": "",
        "workloads/__init__.py": "",
        "workloads/validate/__init__.py": "",
        "workloads/validate/judge.py": "",
        "workloads/collectives/__init__.py": "",
        "workloads/collectives/ops.py": "",
        "workloads/launch/__init__.py": "",
        "workloads/launch/job.py": "",
        importer: text,
    }
    for rel, t in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(t)
    bad = upward_edges(graph(tmp_path, packages=("components", "policies", "workloads")))
    assert len(bad) == 1 and bad[0].startswith(named), bad


def command_imports(source: str) -> set[str]:
    """Every name of the command package (``gpu_cluster``) a module reaches for, by any road: an
    import anywhere (a script block too), or a module path in a string (``importlib``, ``runpy``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return {n for n in found if n == "gpu_cluster" or n.startswith("gpu_cluster.")}


def test_components_never_reach_for_the_command() -> None:
    """The plan's policy pack and rendered job are handed in by ``gpu_cluster/plan.py``; no module
    of ``components/`` imports the command, not even in a script block."""
    reached = {
        f"{p.relative_to(ROOT)}: {sorted(names)}"
        for p in sorted((ROOT / "components").rglob("*.py"))
        if (names := command_imports(p.read_text(encoding="utf-8")))
    }
    assert not reached


@pytest.mark.parametrize(
    "text",
    [
        'if __name__ == "__main__":\n    from gpu_cluster.plan import main\n',
        "import gpu_cluster\n",
        'import importlib\nplan = importlib.import_module("gpu_cluster.plan")\n',
    ],
)
def test_a_planted_reach_for_the_command_is_found(text: str) -> None:
    assert command_imports(text)


def test_a_docstring_naming_the_command_is_not_a_reach() -> None:
    assert not command_imports('"""the command passes it in (gpu_cluster/plan.py)"""\nimport os\n')


def test_a_script_hand_over_is_not_an_edge() -> None:
    src = 'import os\nif __name__ == "__main__":\n    from gpu_cluster.plan import main\n'
    assert imported_names(src) == {"os"}
