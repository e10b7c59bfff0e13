"""``gpu-cluster init``: a Pulumi project of the user's own that deploys what ``gpu-cluster plan`` plans.

It writes into a folder (the current one by default):

- ``Pulumi.yaml``, the project (Python, pip, a ``venv`` virtualenv beside it);
- ``__main__.py``, the program: the same two lines as the checkout's own, building the cluster the
  stack's ``gpu-cluster:cluster`` object describes (:func:`gpu_cluster.components.program.build`);
- ``Pulumi.<stack>.yaml``, copied from the bundled example the user names (the examples ship
  inside the package as ``gpu_cluster/stacks``);
- ``requirements.txt``, gpu-cluster with the example's cloud's extra;
- ``policy-pack/``, the CrossGuard pack run from the install (``pulumi preview --policy-pack
  policy-pack``).

So ``gpu-cluster plan STACK`` there plans exactly the program ``pulumi up`` runs. It refuses to
overwrite anything: every file it would write is checked before the first is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from gpu_cluster.components.problems import output_dir_problem
from gpu_cluster.components.stack_locate import BUNDLED_DIR, bundled_stacks

# Pulumi's stack and project names: letters, digits, hyphens, underscores and periods
# (pulumi.com/docs/iac/concepts/stacks: "Stack names may only contain alphanumeric characters,
# hyphens, underscores, or periods"; projects: the `name` of Pulumi.yaml, same characters).
NAME = re.compile(r"[A-Za-z0-9_.-]+")

PROGRAM = '''"""Pulumi entry point: `pulumi up` builds the cluster the stack's gpu-cluster:cluster describes.

The same program `gpu-cluster plan` plans offline (gpu_cluster.components.program.build); written
by `gpu-cluster init`. To build your own resources beside it, or to use GpuCluster as a library
with your own provider and VPC, see gpu-cluster's docs/library.md.
"""

import pulumi

from gpu_cluster.components import program

for key, value in program.build().items():
    pulumi.export(key, value)
'''

PROJECT = """# A Pulumi project written by `gpu-cluster init` (Pulumi.yaml reference:
# pulumi.com/docs/iac/concepts/projects/project-file: name, runtime, its toolchain and virtualenv).
name: {name}
description: A GPU cluster built by gpu-cluster from Pulumi.{stack}.yaml
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: venv
"""

REQUIREMENTS = """# gpu-cluster with {cloud}'s extra (its provider SDKs) and the policy pack's; `pulumi install`
# (or pip install -r requirements.txt in venv/) installs them. From a checkout: /path/to/gpu-cluster[{cloud},policy].
gpu-cluster[{cloud},policy]
"""

POLICY_MANIFEST = """# gpu-cluster's CrossGuard pack, run from the install: pulumi preview --policy-pack policy-pack
description: gpu-cluster's security and fabric rules (Checkov/Trivy IDs in each rule)
runtime:
  name: python
  options:
    # the project's virtualenv, where gpu-cluster[policy] is installed
    virtualenv: ../venv
"""

POLICY_PROGRAM = '''"""gpu-cluster's policy pack, as installed (gpu_cluster/policies/__main__.py builds it)."""

import runpy

runpy.run_module("gpu_cluster.policies", run_name="__main__")
'''


def files_for(example: str, stack: str, project: str) -> dict[str, str]:
    """Every file ``init`` writes, relative to the folder, with its text."""
    source = (BUNDLED_DIR / f"Pulumi.{example}.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(source)
    cloud = str(doc["config"]["gpu-cluster:cluster"]["cloud"])
    header = f"# Copied by `gpu-cluster init` from the bundled example {example}; edit it for your cluster.\n"
    return {
        "Pulumi.yaml": PROJECT.format(name=project, stack=stack),
        "__main__.py": PROGRAM,
        f"Pulumi.{stack}.yaml": header + source,
        "requirements.txt": REQUIREMENTS.format(cloud=cloud),
        "policy-pack/PulumiPolicy.yaml": POLICY_MANIFEST,
        "policy-pack/__main__.py": POLICY_PROGRAM,
    }


def _parser() -> argparse.ArgumentParser:
    examples = bundled_stacks()
    ap = argparse.ArgumentParser(
        prog="gpu-cluster init",
        description="Write a Pulumi project that deploys a bundled example's cluster (refuses to overwrite).",
        epilog=f"examples: {', '.join(examples) or 'none in this install'}",
    )
    ap.add_argument("folder", nargs="?", default=".", help="where to write it (default: here; made if missing)")
    ap.add_argument("--example", required=True, metavar="NAME", help="the bundled stack to start from")
    ap.add_argument("--stack", metavar="NAME", help="the stack's name (default: the example's)")
    ap.add_argument("--name", metavar="PROJECT", help="the project's name (default: the folder's name)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    examples = bundled_stacks()
    if args.example not in examples:
        ap.error(f"--example {args.example!r} is not a bundled example (allowed: {', '.join(examples) or 'none'})")
    stack = args.stack or args.example
    folder = Path(args.folder).expanduser()
    project = args.name or folder.resolve().name
    for what, value in (("--stack", stack), ("--name", project)):
        if not NAME.fullmatch(value):
            ap.error(f"{what} {value!r}: Pulumi allows only letters, digits, '-', '_' and '.'")
    files = files_for(args.example, stack, project)
    there = sorted(rel for rel in files if (folder / rel).exists())
    if there:
        print(
            f"gpu-cluster init: {folder} already has {', '.join(there)}: nothing was written "
            "(init never overwrites; pick an empty folder)",
            file=sys.stderr,
        )
        return 3
    problem = output_dir_problem(folder)
    if problem:
        print(f"gpu-cluster init: {problem}", file=sys.stderr)
        return 3
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"gpu-cluster init: wrote {', '.join(files)} in {folder}")
    print("next:")
    print(f"  cd {folder}")
    print(f"  gpu-cluster plan {stack}          # what it creates, costs and must achieve (offline)")
    print(f"  pulumi stack init {stack} && pulumi up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
