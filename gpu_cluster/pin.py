"""``gpu-cluster pin STACK``: pin every image the stack pulls by a tag with no published digest.

Each image is asked of its own registry (workloads/validate/registry.py: the Docker Registry HTTP
API V2, anonymously or with the user's ``docker login``), and the digests go into the stack file's
``images:`` (components/image_pins.py). From then on ``pulumi up`` installs the charts, ``render``
writes the jobs and ``submit`` runs them by those digests, and the plan stops listing them.

What is pinned: the in-cluster layer's controllers and, on GKE, an installer the catalog has no
digest for (components/k8s/image_uses.py); the validation job's image and the fabric's receive
datapath sidecar where the catalog names them by tag only. A pin already in the file is kept
(``--refresh`` asks again). Every image is resolved before the file is touched; what did resolve is
written even when another did not, and the file is replaced in one rename, so an interrupted run
leaves the old file whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from gpu_cluster.components.stack_locate import STACK_HELP
from gpu_cluster.components.catalog import load_catalog, rxdm_fact
from gpu_cluster.components.image_pins import PINS_KEY, ImageUse, pinned
from gpu_cluster.components.k8s.image_uses import layer_image_uses
from gpu_cluster.components.spec import ClusterSpec, SpecError
from gpu_cluster.components.stack_file import CONFIG_KEY, load_stack, stack_path
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import registry

Resolve = Callable[[str], str]


def image_uses(spec: ClusterSpec) -> list[ImageUse]:
    """Every image the stack pulls by a tag the catalog has no digest for, pinned or not."""
    if spec.orchestration.kind == "slurm":
        return []  # the Slurm job runs a virtualenv on the shared file system, no image
    uses = list(layer_image_uses(spec))
    it = load_catalog().get(spec.compute.instance_type)
    job = vjob.default_image(it.network.fabric, gpu_runtime=it.software.gpu_runtime)
    if "@" not in job:
        uses.append(ImageUse(job, "the validation job's pods"))
    rx = rxdm_fact(it.network.fabric)
    if rx is not None and not rx.digest:
        uses.append(ImageUse(f"{rx.image}:{rx.tag}", "the receive-datapath sidecar in every job pod"))
    return uses


def write_pins(path: Path, pins: dict[str, str]) -> None:
    """Replace the cluster's ``images:`` block in ``path`` (comments and the rest kept), atomically,
    and check that the file reads back with exactly these pins."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = f"  {CONFIG_KEY}:"
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == header)
    except StopIteration:
        raise SpecError([(str(path), f"no '{header.strip()}' line at two spaces' indent to add images: under")])
    end = len(lines)
    for i in range(start + 1, len(lines)):
        text = lines[i].rstrip("\n")
        if text.strip() and not text.lstrip().startswith("#") and len(text) - len(text.lstrip()) <= 2:
            end = i
            break
    body = lines[start + 1 : end]
    # Drop an earlier images: block (the key at four spaces, its entries deeper, and our comment line).
    kept: list[str] = []
    skipping = False
    for line in body:
        indent = len(line) - len(line.lstrip())
        if line.startswith(f"    {PINS_KEY}:"):
            skipping = True
            if kept and kept[-1].lstrip().startswith("# Pinned by `gpu-cluster pin`"):
                kept.pop()
            continue
        if skipping and (indent > 4 or not line.strip()):
            continue
        skipping = False
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    block = ["    # Pinned by `gpu-cluster pin`: each tag is pulled by its digest (components/image_pins.py).\n"]
    block.append(f"    {PINS_KEY}:\n")
    block += [f"      {json.dumps(ref)}: {json.dumps(d)}\n" for ref, d in sorted(pins.items())]
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    text = "".join([*lines[: start + 1], *kept, *block, *lines[end:]])
    doc = yaml.safe_load(text)
    if (doc["config"][CONFIG_KEY] or {}).get(PINS_KEY) != pins:
        raise RuntimeError(f"{path}: the rewritten file does not read back with the pins; left unchanged")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pin(stack: str, *, refresh: bool, resolve: Resolve, say: Callable[[str], None]) -> int:
    name, spec = load_stack(stack, deployer_placeholder=True)
    uses = image_uses(spec)
    if not uses:
        say(f"{name}: nothing to pin (every image it pulls is by digest, or it runs no image)")
        return 0
    pins = dict(spec.images)
    failed: list[str] = []
    for n, use in enumerate(uses, 1):
        if not refresh and "@" in pinned(use.ref, pins):
            say(f"[{n}/{len(uses)}] {use.ref}: already pinned ({pins[use.ref]}), {use.what}")
            continue
        try:
            digest = resolve(use.ref)
        except registry.RegistryError as exc:
            # The client's advice is submit's (--image); here the way round is the pin by hand.
            why = str(exc).replace(
                "pass --image REF@sha256:...", f"write its digest under images: (crane digest {use.ref})"
            )
            failed.append(why)
            say(f"[{n}/{len(uses)}] {use.ref}: NOT pinned: {why}")
            continue
        old = pins.get(use.ref)
        pins[use.ref] = digest
        moved = f" (was {old}: the tag has moved)" if old and old != digest else ""
        say(f"[{n}/{len(uses)}] {use.ref}: {digest}{moved}, {use.what}")
    if pins != dict(spec.images):
        write_pins(stack_path(stack), pins)
        say(f"wrote {len(pins)} pin(s) to {stack_path(stack)}")
    if failed:
        say(f"{len(failed)} image(s) left by tag; fix what each line says and run pin again")
        return 1
    return 0


def list_uses(stack: str, say: Callable[[str], None]) -> int:
    name, spec = load_stack(stack, deployer_placeholder=True)
    uses = image_uses(spec)
    if not uses:
        say(f"{name}: pulls no container image (its jobs run on the node image): nothing to pin")
        return 0
    for use in uses:
        ref = pinned(use.ref, spec.images)
        say(f"{'pinned ' if '@' in ref else 'BY TAG '} {ref}  ({use.what})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="gpu-cluster pin",
        description="Resolve every image the stack pulls by tag to its registry's digest and write the "
        "digests to the stack file's images: (needs the registries, and `docker login` for a private one).",
    )
    p.add_argument("stack", help=STACK_HELP)
    p.add_argument(
        "--list", action="store_true", help="show what the stack pulls and whether each is pinned; ask no registry"
    )
    p.add_argument(
        "--refresh", action="store_true", help="ask again for images already pinned (a moved tag is reported)"
    )
    args = p.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.list:
            return list_uses(args.stack, say)
        return pin(args.stack, refresh=args.refresh, resolve=registry.resolve, say=say)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
