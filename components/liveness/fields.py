"""The typed-field model the custom resources' APIs are written in (:mod:`.apis`), and the check of
an object's fields against it: a field the type lacks, a required one missing, a wrong type or a
value outside its enum, each with the line of the upstream types file that declares it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


FieldKind = Literal["str", "int", "bool", "quantity", "object", "list", "map", "any"]


@dataclass(frozen=True, slots=True)
class Field:
    line: int
    """The line of the types file that declares it."""
    kind: FieldKind = "any"
    fields: Mapping[str, Field] | None = None
    """An object's fields (None: opaque)."""
    item: Field | None = None
    """A list's item, a map's value."""
    required: bool = False
    enum: tuple[str, ...] = ()
    struct: str = ""
    """The Go type an object is, for messages (``ClusterQueueSpec``)."""
    file: str = ""
    """Another file of the same source, where the field is declared there (a shared type)."""


def s(line: int, *, required: bool = False, enum: tuple[str, ...] = (), file: str = "") -> Field:
    return Field(line, "str", required=required, enum=enum, file=file)


def i(line: int, *, required: bool = False, file: str = "") -> Field:
    return Field(line, "int", required=required, file=file)


def b(line: int, *, required: bool = False, file: str = "") -> Field:
    return Field(line, "bool", required=required, file=file)


def q(line: int, *, required: bool = False) -> Field:
    return Field(line, "quantity", required=required)


def any_(line: int, *, required: bool = False, file: str = "") -> Field:
    return Field(line, "any", required=required, file=file)


def obj(line: int, struct: str, **fields: Field) -> Field:
    """An object of type ``struct`` with these fields."""
    return Field(line, "object", fields=dict(fields), struct=struct)


def lst(line: int, item: Field | None = None, *, required: bool = False, file: str = "") -> Field:
    return Field(line, "list", item=item, required=required, file=file)


def mp(line: int, value: Field | None = None, *, required: bool = False, file: str = "") -> Field:
    return Field(line, "map", item=value, required=required, file=file)


@dataclass(frozen=True, slots=True, kw_only=True)
class Api:
    api_version: str
    kind: str
    repo: str
    """``owner/name``."""
    ref: str
    """The tag (or commit) read, and its commit: ``v0.17.8 (818686e)``."""
    path: str
    """The types file (or CRD manifest) the lines refer to."""
    spec: Field
    """The object's ``spec``."""
    version_note: str = ""
    """Why this version: what the stack pins."""

    def cite(self, line: int | None = None, path: str = "") -> str:
        where = f"{path or self.path}:{line}" if line else (path or self.path)
        return f"{self.repo}@{self.ref} {where}"


@dataclass(frozen=True, slots=True)
class FieldProblem:
    path: str
    """``spec.admissionChecks``."""
    reason: str
    line: int
    file: str = ""


def _type_ok(kind: FieldKind, value: Any) -> bool:
    if value is None:
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "quantity":
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "list":
        return isinstance(value, list | tuple)
    if kind == "map":
        return isinstance(value, Mapping)
    return True


def check_fields(spec_field: Field, value: Any, path: str = "spec") -> list[FieldProblem]:
    """Every field of ``value`` the model does not have, every required one missing, every value
    of the wrong type or outside its enum."""
    out: list[FieldProblem] = []
    if not _type_ok(spec_field.kind, value):
        out.append(FieldProblem(path, f"{value!r} is not a {spec_field.kind}", spec_field.line, spec_field.file))
        return out
    if spec_field.enum and value is not None and value not in spec_field.enum:
        out.append(
            FieldProblem(path, f"{value!r} (allowed: {', '.join(spec_field.enum)})", spec_field.line, spec_field.file)
        )
    if spec_field.kind == "object" and spec_field.fields is not None and isinstance(value, Mapping):
        known = spec_field.fields
        for key, sub in value.items():
            if key not in known:
                out.append(
                    FieldProblem(
                        f"{path}.{key}",
                        f"{spec_field.struct} has no field {key!r}: the API server prunes it "
                        f"({spec_field.struct}'s fields: {', '.join(sorted(known))})",
                        spec_field.line,
                        spec_field.file,
                    )
                )
                continue
            out += check_fields(known[key], sub, f"{path}.{key}")
        for key, sub_field in known.items():
            if sub_field.required and value.get(key) in (None, "", [], {}):
                out.append(
                    FieldProblem(
                        f"{path}.{key}",
                        f"required by {spec_field.struct} and not set",
                        sub_field.line,
                        sub_field.file,
                    )
                )
    elif spec_field.kind == "list" and spec_field.item is not None and isinstance(value, list | tuple):
        for n, item in enumerate(value):
            out += check_fields(spec_field.item, item, f"{path}[{n}]")
    elif spec_field.kind == "map" and spec_field.item is not None and isinstance(value, Mapping):
        for key, item in value.items():
            out += check_fields(spec_field.item, item, f"{path}[{key!r}]")
    return out


def api_for(type_token: str) -> tuple[str, str] | None:
    """(apiVersion, kind) of a pulumi-kubernetes custom resource type token
    (``kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue``), None for any other type."""
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1]:
        return None
    group = parts[1].split("/")[0]
    if "." not in group:  # core, apps, batch, ... and helm.sh / yaml are not custom resources
        return None
    if group in BUILT_IN_GROUPS:
        return None
    return parts[1], parts[2]


# API groups served by Kubernetes itself or by Pulumi's own components, not by a CRD.
BUILT_IN_GROUPS = frozenset(
    {
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "policy",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "helm.sh",
        "yaml",
        "node.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "certificates.k8s.io",
        "autoscaling",
    }
)
