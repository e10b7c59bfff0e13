"""Stack files and the spec's command line: where a stack's cluster description is read from.

A stack file (``Pulumi.<stack>.yaml`` where the Pulumi project keeps its stacks, found as
gpu_cluster.components.stack_locate says, or any path) holds the cluster object under the
config key ``gpu-cluster:cluster``; ``read_stack_file`` returns it raw (a bad file is a
``SpecError`` too), ``load_stack`` parsed. ``python -m gpu_cluster.components.spec STACK`` checks one and
prints the parsed spec; ``fail_cli`` is how every CLI reports a bad stack. Pure: no Pulumi.
"""

from __future__ import annotations

import argparse

import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Sequence

import yaml

from gpu_cluster.components.spec_model import ClusterSpec
from gpu_cluster.components.spec_parse import parse_spec
from gpu_cluster.components.spec_reader import SpecError
from gpu_cluster.components.stack_locate import BUNDLED_DIR, STACK_HELP, locate
from gpu_cluster.components.stack_locate import bundled_stacks as bundled_stacks
from gpu_cluster.components.stack_locate import stack_name as stack_name

CONFIG_KEY = "gpu-cluster:cluster"
STACKS_DIR = BUNDLED_DIR


def stack_path(stack: str) -> Path:
    """A stack's name (found as Pulumi finds it: gpu_cluster.components.stack_locate) or a path to a stack file."""
    return locate(stack).path


def read_stack_file(stack: str) -> tuple[str, Any]:
    """Return (stack name, raw cluster object) of a stack file; SpecError for a bad file."""
    located = locate(stack)
    path = located.path
    if not located.found:
        if path.is_dir():
            inside = sorted(f.name for f in path.glob("Pulumi.*.y*ml"))
            raise SpecError(
                [
                    (
                        str(path),
                        "a folder, not a stack file (allowed: a stack name or a Pulumi.<stack>.yaml file"
                        + (f"; this folder holds {', '.join(inside)})" if inside else ")"),
                    )
                ]
            )
        raise SpecError([(str(path), located.missing())])
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(
            [
                (
                    str(path),
                    f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start} (allowed: UTF-8 YAML)",
                )
            ]
        ) from None
    except OSError as exc:
        raise SpecError([(str(path), f"cannot be read: {exc.strerror or exc}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"
        raise SpecError([(str(path), f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("config"), Mapping):
        raise SpecError([(str(path), "a stack file needs a 'config:' mapping")])
    if CONFIG_KEY not in doc["config"]:
        raise SpecError([(f"config.{CONFIG_KEY}", "required (the cluster description)")])
    return stack_name(path), doc["config"][CONFIG_KEY]


def load_stack(stack: str, *, deployer_placeholder: bool = False) -> tuple[str, ClusterSpec]:
    name, raw = read_stack_file(stack)
    return name, parse_spec(raw, default_name=default_name(name), deployer_placeholder=deployer_placeholder)


def default_name(stack: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]", "-", stack.lower()).strip("-")[:32] or "gpu"
    return cleaned if cleaned[0].isalpha() else f"c-{cleaned}"[:32]


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """``python -m gpu_cluster.components.spec STACK``: check a stack file and print the parsed spec."""
    ap = argparse.ArgumentParser(
        prog="gpu-cluster spec", description="Check one stack file alone and print what it describes."
    )
    ap.add_argument("stack", help=STACK_HELP)
    args = ap.parse_args(argv)
    try:
        name, spec = load_stack(args.stack)
    except SpecError as err:
        fail_cli(err)
    out(f"{name}: ok ({spec.cloud} {spec.compute.nodes} x {spec.compute.instance_type}, {spec.orchestration.kind})")
    return 0


def fail_cli(err: SpecError, prefix: str = "gpu-cluster") -> NoReturn:
    """How every CLI reports a bad stack: the list on stderr, exit 2, no traceback."""
    print(f"{prefix}: {err.render()}", file=sys.stderr)
    raise SystemExit(2)
