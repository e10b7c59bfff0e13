"""The stack's image pins: ``images: {"<repo>:<tag>": "sha256:<64 hex>"}`` in ``gpu-cluster:cluster``.

What a cluster pulls by a tag the catalog holds no published digest for (a chart's controller, an
installer, the validation job's image) is pulled by the digest pinned here instead, so what runs
cannot change under a fleet when the tag is moved. ``gpu-cluster pin STACK`` fills the mapping by
asking each image's registry (workloads/validate/registry.py); a person can write it by hand from
``crane digest REF`` (go-containerregistry). A digest the catalog already has wins over none, and a
pin never replaces an image the stack or catalog names by digest.

Pure: no Pulumi, no cloud SDK, so the spec, the plan, the jobs and the pin command share it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PINS_KEY = "images"
# A reference with a tag and no digest: optional registry host and port, a path of lower-case
# components, then ``:tag`` (the OCI distribution spec's tag grammar, [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
TAG_REF = re.compile(
    r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z"
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True, slots=True)
class ImageUse:
    """One image a stack pulls by tag unless it is pinned."""

    ref: str
    """``repo:tag``, no digest."""
    what: str
    """Who pulls it, for a person: "the Kueue controller of chart 0.17.8"."""
    installer: bool = False
    """The GKE NCCL plugin installer: unpinned, it is not planned at all (a caveat of its own)."""


def check_pins(raw: Any) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The pins and the problems with ``images`` (each: path, why), every one at once."""
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        return {}, [(PINS_KEY, f"expected a mapping of repo:tag to sha256:<64 hex>, got {type(raw).__name__}")]
    pins: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for ref, digest in raw.items():
        path = f"{PINS_KEY}.{ref}"
        if not isinstance(ref, str) or not TAG_REF.match(ref):
            problems.append(
                (path, f"{ref!r} is not an image reference with a tag and no digest (allowed: registry/path:tag)")
            )
            continue
        if not isinstance(digest, str) or not DIGEST.match(digest):
            problems.append(
                (
                    path,
                    f"{digest!r} is not a digest (allowed: sha256: and 64 lower-case hex digits, from "
                    f"`gpu-cluster pin STACK` or `crane digest {ref}`)",
                )
            )
            continue
        pins[ref] = digest
    return pins, problems


def pinned(ref: str, pins: Mapping[str, str]) -> str:
    """``ref@digest`` where ``ref`` (a ``repo:tag``) is pinned; ``ref`` as it is otherwise, and
    always where it already carries a digest."""
    if "@" in ref:
        return ref
    digest = pins.get(ref)
    return f"{ref}@{digest}" if digest else ref


def split_tag(ref: str) -> tuple[str, str]:
    """``(repository, tag)`` of a ``repo:tag`` (a registry port is not a tag)."""
    repo, _, tag = ref.rpartition(":")
    if not repo or "/" in tag:
        raise ValueError(f"{ref!r} has no tag")
    return repo, tag


def chart_image(ref: str, pins: Mapping[str, str]) -> dict[str, str] | None:
    """``{repository, tag}`` for a chart whose template writes ``repository:tag``, the tag carrying
    the pinned digest (``v0.17.8@sha256:...``); None where ``ref`` is not pinned (the chart's own
    default then stands, by tag)."""
    digest = pins.get(ref)
    if not digest:
        return None
    repo, tag = split_tag(ref)
    return {"repository": repo, "tag": f"{tag}@{digest}"}


def mirrored(ref: str, mirrors: Mapping[str, str]) -> str:
    """``ref`` as pulled through a mirror of its registry (``public.ecr.aws/x/y:t`` to
    ``<mirror>/x/y:t``, tag and digest kept), or as it is where its registry has none."""
    host, slash, rest = ref.partition("/")
    mirror = mirrors.get(host) if slash else None
    return f"{mirror}/{rest}" if mirror else ref


def unpinned(uses: list[ImageUse], pins: Mapping[str, str]) -> list[ImageUse]:
    """The uses still pulled by tag."""
    return [u for u in uses if "@" not in pinned(u.ref, pins)]
