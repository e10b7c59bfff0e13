"""Run the real Pulumi program without the Pulumi engine, under Pulumi's own mock monitor.

The offline plan and the unit tests both come through here. The program is the one
``pulumi up`` runs (``gpu_cluster.components.program.build``); only the engine is replaced:

* every resource registration is recorded with its parent, options and inputs, so the plan
  can group resources by pillar and the tests can read any input;
* invokes are answered by a strict table that each cloud package declares
  (``components.<cloud>.mocks.INVOKES``): an invoke nobody declared fails the run loudly
  instead of returning ``{}`` as Pulumi's default mock does;
* provider-computed attributes (ARNs, DNS names, endpoints) come from each cloud's
  ``COMPUTED`` table, so outputs that depend on them resolve to plausible values.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import pulumi
from pulumi.runtime import mocks as _mocks
from pulumi.runtime.sync_await import _sync_await

InvokeFn = Callable[[Mapping[str, Any]], dict[str, Any]]
ComputedFn = Callable[[str, Mapping[str, Any]], dict[str, Any]]

PROJECT = "gpu-cluster"
CONFIG_KEY = "gpu-cluster:cluster"


class UnknownInvokeError(RuntimeError):
    """The program called a provider function the offline engine was not told about."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """One resource registration as the engine would have received it."""

    type: str
    name: str
    urn: str
    parent: str
    """URN of the parent resource ('' for the stack's direct children)."""
    custom: bool
    """False for component resources (pure grouping), True for provider resources."""
    inputs: dict[str, Any]
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    ignore_changes: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    """The inputs whose change replaces the resource, as its SDK declares them (pulumi-aws-native
    declares CloudFormation's create-only properties; pulumi-aws declares none: its provider decides)."""
    dependencies: tuple[str, ...] = ()
    """URNs of the resources it waits for (``depends_on`` and the inputs' own resources)."""
    provider: str = ""
    """The explicit provider reference (``<provider urn>::<id>``), '' for the default provider."""
    id: str = ""
    """The id the engine gave it: what other resources' inputs name it by."""
    import_id: str = ""
    """The ``import_`` option: the id of an existing resource the engine adopts ('' for a new one)."""


@dataclass(slots=True)
class OfflineRun:
    stack: str
    resources: list[Recorded] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    invokes: list[str] = field(default_factory=list)

    def of_type(self, type_token: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str) -> Recorded:
        found = self.of_type(type_token)
        if len(found) != 1:
            raise AssertionError(f"expected one {type_token}, found {len(found)}: {[r.name for r in found]}")
        return found[0]

    def by_urn(self) -> dict[str, Recorded]:
        return {r.urn: r for r in self.resources}

    def ancestors(self, res: Recorded) -> list[Recorded]:
        index = self.by_urn()
        chain: list[Recorded] = []
        parent = res.parent
        while parent and parent in index:
            chain.append(index[parent])
            parent = index[parent].parent
        return chain


STACK_REFERENCE = "pulumi:pulumi:StackReference"


class _StrictMocks(pulumi.runtime.Mocks):
    def __init__(
        self,
        invokes: Mapping[str, InvokeFn],
        computed: Mapping[str, ComputedFn],
        run: OfflineRun,
        stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self._invokes = invokes
        self._computed = computed
        self._run = run
        self._stack_outputs = stack_outputs or {}

    def new_resource(self, args: _mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == STACK_REFERENCE:
            # A stack the engine was not given is a test that forgot it, not an empty stack.
            referenced = str(args.inputs.get("name", ""))
            if referenced not in self._stack_outputs:
                raise UnknownInvokeError(
                    f"offline engine: StackReference {referenced!r} was not given to run_offline "
                    f"(given: {sorted(self._stack_outputs)})"
                )
            return referenced, {
                "name": referenced,
                "outputs": dict(self._stack_outputs[referenced]),
                "secretOutputNames": [],
            }
        fn = self._computed.get(args.typ)
        if fn is not None:
            state.update(fn(args.name, args.inputs))
        return f"{args.name}-id", state

    def call(self, args: _mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        fn = self._invokes.get(args.token)
        if fn is None:
            raise UnknownInvokeError(
                f"offline engine: the program invoked {args.token} with {dict(args.args)!r}, which no cloud "
                "package declared in its mocks.INVOKES; declare it (camelCase answer) or stop calling it"
            )
        self._run.invokes.append(args.token)
        # A (result, None) tuple crashes MockMonitor.Invoke, which iterates the failures.
        return fn(args.args), []


class _RecordingMonitor(_mocks.MockMonitor):
    def __init__(self, mocks: _StrictMocks, run: OfflineRun):
        super().__init__(mocks)
        self._run = run

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            registered = self.resources.get(response.urn)
            self._run.resources.append(
                Recorded(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    custom=bool(request.custom),
                    inputs=_plain(dict(registered.state)) if registered else {},
                    protect=bool(request.protect),
                    retain_on_delete=bool(getattr(request, "retainOnDelete", False)),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    ignore_changes=tuple(request.ignoreChanges),
                    replace_on_changes=tuple(request.replaceOnChanges),
                    dependencies=tuple(request.dependencies),
                    provider=str(request.provider or ""),
                    id=str(getattr(response, "id", "") or ""),
                    import_id=str(getattr(request, "importId", "") or ""),
                )
            )
        return response


@contextlib.contextmanager
def _in_declared_order(run: OfflineRun) -> Iterator[None]:
    """Leave ``run.resources`` in the order the program declares them.

    The monitor sees a registration only once the resource's inputs have resolved, and the SDK
    resolves them on its own threads and tasks: the same program, even under the same
    PYTHONHASHSEED, records its resources in a different order from run to run, and the plan a
    user diffs before ``pulumi up`` (and its liveness checks, which follow the resources) would
    change order with it. The constructors themselves run in the program's own order, and a
    resource can only name one constructed before it, so that order is stable, reads like the
    program, and keeps every resource after what it depends on (``replacements`` relies on it).
    ``pulumi.resource`` calls ``register_resource`` synchronously from ``Resource.__init__``
    (pulumi 3.x, pulumi/resource.py ``_init``); we note each call there, then sort by it.
    """
    import pulumi.resource as sdk_resource

    declared: list[tuple[str, str]] = []
    original = sdk_resource.register_resource  # type: ignore[attr-defined]

    def noting(res: Any, ty: str, name: str, *args: Any, **kwargs: Any) -> None:
        declared.append((ty, name))
        original(res, ty, name, *args, **kwargs)

    sdk_resource.register_resource = noting  # type: ignore[attr-defined]
    try:
        yield
    finally:
        sdk_resource.register_resource = original  # type: ignore[attr-defined]
    # (type, name) can repeat under different parents: those share their first declaration's
    # place and fall back on the URN among themselves. Anything not noted (none today) goes last.
    first: dict[tuple[str, str], int] = {}
    for i, key in enumerate(declared):
        first.setdefault(key, i)
    run.resources.sort(key=lambda r: (first.get((r.type, r.name), len(declared)), r.urn))


def _plain(value: Any) -> Any:
    """Inputs as JSON-able data (mock numbers come back as floats; keep them as given)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _tables(cloud: str) -> tuple[Mapping[str, InvokeFn], Mapping[str, ComputedFn]]:
    import importlib

    mod = importlib.import_module(f"gpu_cluster.components.{cloud}.mocks")
    invokes: dict[str, InvokeFn] = dict(getattr(mod, "INVOKES"))
    computed: dict[str, ComputedFn] = dict(getattr(mod, "COMPUTED"))
    # The in-cluster add-ons (pulumi-kubernetes) are shared by EKS and GKE.
    try:
        k8s = importlib.import_module("gpu_cluster.components.k8s.mocks")
    except ModuleNotFoundError:
        return invokes, computed
    invokes.update(getattr(k8s, "INVOKES", {}))
    computed.update(getattr(k8s, "COMPUTED", {}))
    return invokes, computed


def run_program(
    stack: str,
    program: Callable[[], Mapping[str, Any] | None],
    cloud: str = "aws",
    config: Mapping[str, str] | None = None,
) -> OfflineRun:
    """Run any Pulumi program body under the same strict mocks (a program using GpuCluster as a
    library, examples/python). ``program`` returns the outputs to resolve, or None."""
    os.environ["PULUMI_ERROR_OUTPUT_STRING"] = "1"
    run = OfflineRun(stack=stack)
    invokes, computed = _tables(cloud)
    mocks = _StrictMocks(invokes, computed, run)
    # A new root stack for this run: set_mocks keeps the one an earlier run in this process made,
    # and with it that run's exports, which a program that exports would then report as its own.
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=_RecordingMonitor(mocks, run))
    pulumi.runtime.set_all_config(dict(config or {}))
    settings = pulumi.runtime.settings.SETTINGS
    settings.rpc_manager.clear()
    settings.outputs.clear()

    def body() -> None:
        outputs = program()
        if outputs is None:  # a program that exports: the stack's own outputs
            root = pulumi.runtime.settings.get_root_resource()
            outputs = dict(getattr(root, "outputs", {}) or {})
        resolved = _sync_await(pulumi.Output.all(**outputs).future()) if outputs else {}
        run.outputs = _plain(resolved or {})

    with _in_declared_order(run):
        _sync_await(pulumi.runtime.stack.run_pulumi_func(body))
    return run


def run_offline(
    stack: str,
    cluster: Mapping[str, Any],
    extra_config: Mapping[str, str] | None = None,
    stack_outputs: Mapping[str, Mapping[str, Any]] | None = None,
) -> OfflineRun:
    """Run ``gpu_cluster.components.program.build`` for one stack's cluster object and record everything.

    ``cluster`` is the raw ``gpu-cluster:cluster`` object: the program parses it itself,
    exactly as under ``pulumi up``, so spec errors surface the same way. ``stack_outputs``
    answers StackReferences (stack name -> its outputs), for the in-cluster layer program.
    """
    from gpu_cluster.components import program

    os.environ["PULUMI_ERROR_OUTPUT_STRING"] = "1"  # an Output in an f-string raises
    cloud = str(cluster.get("cloud", "aws")) if isinstance(cluster, Mapping) else "aws"
    invokes, computed = _tables(cloud if cloud in ("aws", "gcp", "azure") else "aws")
    run = OfflineRun(stack=stack)
    mocks = _StrictMocks(invokes, computed, run, stack_outputs)
    monitor = _RecordingMonitor(mocks, run)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    config = {CONFIG_KEY: json.dumps(cluster)}
    config.update(extra_config or {})
    pulumi.runtime.set_all_config(config)

    settings = pulumi.runtime.settings.SETTINGS
    settings.rpc_manager.clear()
    settings.outputs.clear()

    def body() -> None:
        outputs = program.build()
        resolved = _sync_await(pulumi.Output.all(**outputs).future()) if outputs else {}
        run.outputs = _plain(resolved or {})

    program.OFFLINE_PLAN = True
    try:
        with _in_declared_order(run):
            _sync_await(pulumi.runtime.stack.run_pulumi_func(body))
    finally:
        program.OFFLINE_PLAN = False
    return run


def replacements(before: OfflineRun, after: OfflineRun) -> dict[str, tuple[str, ...]]:
    """What ``after`` would replace of what ``before`` created: resource name -> why (the inputs
    declared replace-on-change that differ, or ``replaced with <name>`` when such an input carries
    the id of a resource that is itself replaced). Names only what the SDKs declare (see
    ``Recorded.replace_on_changes``); a provider's own diff, such as pulumi-aws's, is not seen here."""
    old = {(r.type, r.name): r for r in before.resources if r.custom}
    urns = {r.urn: r for r in after.resources}
    found: dict[str, tuple[str, ...]] = {}
    for res in after.resources:
        prev = old.get((res.type, res.name))
        if prev is None:
            continue
        keys = {re.split(r"[.\[]", p, maxsplit=1)[0] for p in res.replace_on_changes}
        why = [k for k in sorted(keys) if prev.inputs.get(k) != res.inputs.get(k)]
        for dep in res.dependencies:
            up = urns.get(dep)
            if up is not None and up.name in found:
                carried = [k for k in keys if up.name in json.dumps(res.inputs.get(k), default=str)]
                if carried:
                    why.append(f"replaced with {up.name}")
        if why:
            found[res.name] = tuple(why)
    return found
