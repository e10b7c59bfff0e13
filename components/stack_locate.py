"""Where a stack's file is: found the way Pulumi finds it, or given as a path.

A name (``mine``) is looked up as Pulumi looks it up: the project file (``Pulumi.yaml``, or
``Pulumi.yml``) in the current folder or the nearest of its parents, then ``Pulumi.<name>`` with
the project file's extension in the project's ``stackConfigDir`` (relative to the project file;
the project's own folder when it has none): pulumi/pulumi sdk/go/common/workspace/paths.go
(DetectProjectPathFrom, ProjectStackPath) at 01c4ec37f501a3eb579e0a092da0e63fc43cf03c. A fully qualified name (``org/project/mine``) names the file by its last part, as
Pulumi's does. A path to a stack file (anything ending ``.yaml``/``.yml``, or a file that exists)
is read as it is, from any command that takes a stack.

Outside any Pulumi project the names are the bundled example stacks (this checkout's
``stacks/``, ``gpu-cluster plan --all`` plans every one); inside one, an example is reached by
its path, which the error for a name the project lacks prints. Every miss says where it looked.

Shared by both sides of the house (the plan, and the validation and heal commands that run
without Pulumi): the standard library and PyYAML only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "stacks"
"""The bundled example stacks: the checkout's stacks/, which the wheel installs as gpu_cluster/stacks."""
STACK_HELP = (
    "a stack name (Pulumi.NAME.yaml in the stackConfigDir of the Pulumi.yaml here or above; "
    "outside a project, a bundled example) or a stack file's path"
)


@dataclass(frozen=True, slots=True)
class Located:
    """Where ``stack`` resolves to; ``path`` may not exist (then ``missing`` says where it looked)."""

    stack: str
    """What the user typed."""
    path: Path
    name: str
    """The stack's name: ``Pulumi.<name>.yaml``'s name, also what ``pulumi --stack`` takes."""
    where: str
    """How it was found, for the lines a person reads."""
    looked: tuple[str, ...] = ()
    """Where a name was looked for, in order."""

    @property
    def found(self) -> bool:
        return self.path.is_file()

    def missing(self) -> str:
        """The reason a name did not resolve, naming every place it looked."""
        text = f"no stack file for {self.stack!r}: looked for " + "; then ".join(self.looked)
        example = BUNDLED_DIR / f"Pulumi.{self.name}.yaml"
        if self.where != "bundled" and example.is_file():
            text += f" ({self.name} is a bundled example: pass its path, {example})"
        elif self.where != "bundled" and bundled_stacks():
            text += f" (the bundled examples, by path under {BUNDLED_DIR}/: {', '.join(bundled_stacks())})"
        return text


def stack_name(path: Path) -> str:
    """``Pulumi.<name>.yaml`` -> ``name``; any other file name -> its stem."""
    n = path.name
    for ext in (".yaml", ".yml"):
        if n.startswith("Pulumi.") and n.endswith(ext):
            return n[len("Pulumi.") : -len(ext)]
    return path.stem


def bundled_stacks() -> list[str]:
    return sorted(stack_name(p) for p in BUNDLED_DIR.glob("Pulumi.*.yaml"))


def is_path(stack: str) -> bool:
    """A stack given as a file's path rather than a name; a folder written as a path (``./stacks/``,
    ``/home/me/infra``) too, so it is refused as a folder rather than looked up as a stack named ''."""
    path = Path(stack).expanduser()
    if path.is_dir() and (stack.endswith(("/", os.sep)) or stack.startswith((".", "/", "~"))):
        return True
    return path.suffix in (".yaml", ".yml") or path.is_file()


def find_project(start: Path | None = None) -> Path | None:
    """The project file Pulumi would use from ``start`` (default: the current folder)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        for name in PROJECT_FILES:
            if (folder / name).is_file():
                return folder / name
    return None


def stack_config_dir(project: Path) -> Path:
    """The folder a project keeps its stack files in (``stackConfigDir``, else its own)."""
    try:
        doc = yaml.safe_load(project.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        doc = None
    sub = doc.get("stackConfigDir") if isinstance(doc, dict) else None
    return (project.parent / str(sub)).resolve() if sub else project.parent


def locate(stack: str, cwd: Path | None = None) -> Located:
    """Resolve a stack name or path (see the module's docstring); never raises for a miss."""
    if is_path(stack):
        path = Path(stack).expanduser()
        return Located(stack, path, stack_name(path), "path", (str(path),))
    name = stack.replace(os.sep, "/").split("/")[-1]
    project = find_project(cwd)
    if project is not None:
        folder = stack_config_dir(project)
        ext = ".yml" if project.name.endswith(".yml") else ".yaml"
        path = folder / f"Pulumi.{name}{ext}"
        where = (
            f"{path} (the stackConfigDir of {project})" if folder != project.parent else f"{path} (beside {project})"
        )
        return Located(stack, path, name, "project", (where,))
    start = (cwd or Path.cwd()).resolve()
    path = BUNDLED_DIR / f"Pulumi.{name}.yaml"
    return Located(
        stack,
        path,
        name,
        "bundled",
        (
            f"a Pulumi.yaml in {start} and its parents (none)",
            f"the bundled examples, {path} (examples: {', '.join(bundled_stacks()) or 'none in this install'})",
        ),
    )


def project_stacks(cwd: Path | None = None) -> tuple[list[str], str]:
    """The stacks ``--all`` means, and where they are: in a Pulumi project (the Pulumi.yaml here or
    above), its stack files that describe a cluster (a ``gpu-cluster:cluster`` object); outside
    one, the bundled examples. A checkout is a project whose stackConfigDir is the examples'."""
    project = find_project(cwd)
    if project is None:
        return bundled_stacks(), f"the bundled examples ({BUNDLED_DIR})"
    folder = stack_config_dir(project)
    names = []
    for path in sorted(folder.glob("Pulumi.*.y*ml")):
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            doc = None  # not a stack file of ours: --all leaves it out
        config = doc.get("config") if isinstance(doc, dict) else None
        if isinstance(config, dict) and "gpu-cluster:cluster" in config:
            names.append(stack_name(path))
    return names, f"the stacks of {project} ({folder})"


def stack_label(stack: str) -> str:
    """The stack's name, for folders named after it (``out/validate/<name>/``) and ``pulumi --stack``."""
    return locate(stack).name
