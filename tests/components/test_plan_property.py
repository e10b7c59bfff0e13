"""Property: no cluster object a user can write makes the plan crash with anything but a spec error.

Examples mix catalog-valid values for every spec field (so many of them run the real program
under the mock engine) with garbage: wrong types, unknown keys, missing keys. A spec that
parse_spec rejects must be rejected by the program too, as Pulumi's InputPropertiesError; a
spec it accepts must run and summarize without error.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import pulumi
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpu_cluster.components.catalog import load_catalog
from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.plan import summarize
from gpu_cluster.components.lustre_tiers import lustre_tiers
from gpu_cluster.components.spec import CAPACITY_TYPES, ORCHESTRATORS, PRE_PLACED, SpecError, parse_spec

CATALOG = load_catalog()

garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from(["", " ", "\x00", "us-east-1", "aws", "gcp", "auto", "1.33", "-1", "1e9", "cr-zz"]),
)


@st.composite
def valid_cluster(draw: st.DrawFn) -> dict[str, Any]:
    cloud = draw(st.sampled_from(("aws", "gcp")))
    itype = draw(st.sampled_from(CATALOG.names(cloud)))
    loc = draw(st.sampled_from(CATALOG.get(itype).locations))
    if cloud == "aws":
        region, zone = loc, loc + draw(st.sampled_from("abcd"))
    else:
        region, zone = loc.rsplit("-", 1)[0], loc
    ctype = draw(st.sampled_from(CAPACITY_TYPES[cloud]))
    capacity: dict[str, Any] = {"type": ctype}
    if ctype in PRE_PLACED:
        capacity["id"] = "cr-0123456789abcdef0" if cloud == "aws" else draw(st.sampled_from(["res-a", "block1"]))
    tiers = lustre_tiers(cloud)
    tput = draw(st.sampled_from(tiers.throughputs))
    if cloud == "aws":
        size = draw(st.sampled_from([1200, 2400, 4800, 2400 * 1000]))
    else:
        size = tiers.tiers[tput].min * draw(st.integers(1, 3))
    lustre: dict[str, Any] = {"size_gib": size, "throughput_mbps_per_tib": tput}
    scheme = "s3://" if cloud == "aws" else "gs://"
    if draw(st.booleans()):
        lustre["import_path"] = scheme + "bucket/prefix/"
    # The export path: the import path (the one FSx data repository association), another
    # prefix, or one without an import path; only the first, and only on AWS, is a valid stack.
    export = draw(st.sampled_from([None, None, None, None, "same", "same", "other", "orphan"]))
    if export == "same":
        lustre["import_path"] = lustre["export_path"] = scheme + "bucket/prefix/"
    elif export == "other":
        lustre["import_path"], lustre["export_path"] = scheme + "bucket/prefix/", scheme + "bucket/elsewhere/"
    elif export == "orphan":
        lustre.pop("import_path", None)
        lustre["export_path"] = scheme + "bucket/prefix/"
    orch: dict[str, Any] = {"kind": draw(st.sampled_from(ORCHESTRATORS[cloud]))}
    if orch["kind"] == "slurm" and draw(st.booleans()):
        orch["login_nodes"] = draw(st.integers(0, 2))
        orch["partition"] = draw(st.sampled_from(["gpu", "train1"]))
    elif orch["kind"] != "slurm":
        # A public endpoint needs the deployer's range (a global one: documentation ranges are
        # refused); a private one needs none. Now and then the renamed key, which is refused.
        choice = draw(st.sampled_from(["public", "public", "private", "renamed"]))
        if choice == "public":
            orch["deployer_cidrs"] = ["203.0.114.0/24"]
        elif choice == "private":
            orch["endpoint"] = "private"
        else:
            orch["api_access_cidrs"] = ["203.0.114.0/24"]
    raw: dict[str, Any] = {
        "cloud": cloud,
        "region": region,
        "zone": zone,
        "compute": {"instance_type": itype, "nodes": draw(st.integers(1, 4)), "capacity": capacity},
        "storage": {"lustre": lustre},
        "orchestration": orch,
    }
    if draw(st.booleans()):
        raw["name"] = draw(st.sampled_from(["prop-test", "gpu2"]))
    if draw(st.booleans()):
        raw["interconnect"] = {"placement": draw(st.sampled_from(["auto", True, False]))}
    if draw(st.booleans()):
        raw["tags"] = draw(
            st.dictionaries(
                st.sampled_from(["team", "env", "cost_center"]), st.sampled_from(["ml", "prod", "a-1"]), max_size=2
            )
        )
    if draw(st.booleans()):
        raw["security"] = draw(security())
    return raw


@st.composite
def security(draw: st.DrawFn) -> dict[str, Any]:
    """The security: block: each key present or not; flow logs off with or without its reason."""
    block: dict[str, Any] = {}
    if draw(st.booleans()):
        block["flow_logs"] = draw(st.booleans())
    if draw(st.booleans()):
        block["log_retention_days"] = draw(st.sampled_from([1, 90, 365, 3653]))
    if draw(st.booleans()):
        block["checkpoint_noncurrent_days"] = draw(st.sampled_from([1, 7, 30]))
    why = "two-day benchmark cluster, torn down after the run"
    exceptions = draw(
        st.sampled_from(
            [
                None,
                {"flow-logs": why},
                {"flow-logs": why},
                {"flow-logs": "short"},
                {"flow-logs": why, "bucket-versioning": why},
            ]
        )
    )
    if exceptions is not None:
        block["exceptions"] = exceptions
    return block


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    return out


@st.composite
def mutated(draw: st.DrawFn, raw: dict[str, Any]) -> Any:
    """Up to three edits: replace a value with garbage, drop a key, or add an unknown key."""
    raw = copy.deepcopy(raw)
    for _ in range(draw(st.sampled_from((0, 0, 1, 2, 3)))):
        paths = [p for p in _paths(raw) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = raw
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(("replace", "drop", "unknown", "newline")))
        if action == "replace":
            parent[path[-1]] = draw(garbage)
        elif action == "newline":  # a trailing newline must not slip past a '$'-anchored pattern
            if isinstance(parent[path[-1]], str):
                parent[path[-1]] += draw(st.sampled_from(["\n", "\r\n", "\x00"]))
        elif action == "drop":
            del parent[path[-1]]
        else:
            parent[draw(st.sampled_from(["bogus", "Nodes", "zones", "1"]))] = draw(garbage)
    if draw(st.integers(0, 19)) == 0:
        return draw(garbage)  # not a mapping at all
    return raw


clusters = valid_cluster().flatmap(mutated)


def _parses(raw: Any) -> bool:
    try:
        parse_spec(raw, default_name="prop")
        return True
    except SpecError:
        return False


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(clusters)
def test_parse_spec_raises_only_spec_error(raw: Any) -> None:
    try:
        spec = parse_spec(raw, default_name="prop")
    except SpecError as err:
        assert err.problems and all(isinstance(p, str) and isinstance(r, str) for p, r in err.problems)
        assert err.render()
        return
    assert spec.compute.nodes >= 1
    lustre = spec.storage.lustre
    if lustre.export_path is not None:  # one data repository association, on AWS only
        assert spec.cloud == "aws" and lustre.export_path == lustre.import_path, raw
    if not spec.security.flow_logs:  # switched off only with the stack's reason
        assert len(spec.security.exceptions.get("flow-logs", "")) >= 10, raw
    for text in _strings(spec):
        assert not any(ord(c) < 0x20 for c in text), f"parse_spec accepted {text!r}"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value):
        return [s for f in dataclasses.fields(value) for s in _strings(getattr(value, f.name))]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


@settings(
    max_examples=35,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(clusters)
def test_program_fails_only_with_input_properties_error(raw: Any) -> None:
    if not _parses(raw):
        event("rejected by parse_spec")
        try:
            run_offline("prop-test", raw)
        except pulumi.InputPropertiesError:
            return
        raise AssertionError(f"parse_spec rejected {raw!r} but the program ran")
    event("ran the program")
    spec = parse_spec(raw, default_name="prop-test")
    run = run_offline("prop-test", raw)
    summary = summarize("prop-test", spec, run)
    assert summary.nodes == spec.compute.nodes and summary.resources > 0


def test_trailing_newline_is_refused_in_every_patterned_field() -> None:
    """'$' matches before a final newline; every pattern must anchor at the true end."""
    from gpu_cluster.components.spec import read_stack_file

    _, base = read_stack_file("aws-h100-eks")
    edits = {
        "name": lambda r: r.__setitem__("name", "gpu-a\n"),
        "partition": lambda r: r.__setitem__("orchestration", {"kind": "slurm", "partition": "gpu\n"}),
        "bucket_name": lambda r: r["storage"].__setitem__("bucket_name", "bucket-a\n"),
        "kubernetes_version": lambda r: r["orchestration"].__setitem__("kubernetes_version", "1.33\n"),
        "mount_point": lambda r: r["storage"]["lustre"].__setitem__("mount_point", "/fsx\n"),
    }
    accepted = []
    for field, edit in edits.items():
        raw = copy.deepcopy(base)
        edit(raw)
        if _parses(raw):
            accepted.append(field)
    assert not accepted, f"parse_spec accepted a trailing newline in {accepted}"


def test_the_generator_reaches_accepted_export_paths_and_security_blocks() -> None:
    """The properties above see these fields only if valid examples carry them."""
    from hypothesis import find

    reach = {
        "export_path": lambda r: "export_path" in r["storage"]["lustre"],
        "flow logs off with the reason": lambda r: r.get("security", {}).get("flow_logs") is False,
        "log retention": lambda r: "log_retention_days" in r.get("security", {}),
    }
    for what, has in reach.items():
        raw = find(
            valid_cluster(),
            lambda r, has=has: has(r) and _parses(r),
            settings=settings(
                max_examples=2000, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
            ),
        )
        assert has(raw), what
