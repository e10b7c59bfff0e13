"""Testing your own Pulumi program that uses GpuCluster, offline: no Pulumi CLI, no cloud account.

Two ways, both under Pulumi's own mock engine (``pulumi.runtime.set_mocks``):

* :func:`run_program` runs a program body (a function, or ``runpy.run_path`` of your
  ``__main__.py``) and returns an :class:`OfflineRun`: every resource registered, with its
  parent, provider and inputs, and the program's outputs resolved to plain values. The offline
  plan (``gpu-cluster plan``) comes through the same engine::

      from gpu_cluster.components.testing import run_program

      run = run_program("test", lambda: runpy.run_path("__main__.py", run_name="__main__") and None)
      assert not run.of_type("aws:ec2/vpc:Vpc")

* Pulumi's standard recipe (``set_mocks``, then ``@pulumi.runtime.test``), with
  :class:`GpuClusterMocks` as the mocks. The component asks its cloud for facts (the GPU image's
  id, the zone's id, the account) and reads the attributes the provider computes (ARNs, endpoints);
  a ``Mocks`` that answers every call with ``{}`` and echoes the inputs leaves those ``None``, and
  the run fails inside the component. ``GpuClusterMocks`` answers them from each cloud's offline
  tables (``components/<cloud>/mocks.py``, what the offline plan answers) and records what was
  registered in ``resources``; subclass it and call ``super()`` for what your own resources need::

      pulumi.runtime.set_mocks(GpuClusterMocks("aws"), preview=False)
      cluster = GpuCluster("train", GpuClusterArgs(...))

      @pulumi.runtime.test
      def test_nodes():
          return cluster.nodes.apply(lambda n: assert_equal(n, 2))

examples/python/test_program.py does both; CI runs it (tests/test_examples.py).
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import mocks as _mocks

from gpu_cluster.components.engine import (
    STACK_REFERENCE,
    OfflineRun,
    Recorded,
    UnknownInvokeError,
    _tables,
    run_program,
)

__all__ = ["GpuClusterMocks", "OfflineRun", "Recorded", "UnknownInvokeError", "run_program"]


class GpuClusterMocks(pulumi.runtime.Mocks):
    """``pulumi.runtime.Mocks`` that answer what GpuCluster asks of ``cloud`` (aws, gcp, azure).

    ``strict`` (default): an invoke no table declares raises :class:`UnknownInvokeError` naming
    it, rather than answering ``{}`` and failing later inside the component; pass ``False`` to
    answer ``{}`` as Pulumi's default mocks do (for invokes of your own program)."""

    def __init__(self, cloud: str = "aws", *, strict: bool = True) -> None:
        self.cloud = cloud
        self.strict = strict
        self.invokes, self.computed = _tables(cloud)
        self.resources: list[_mocks.MockResourceArgs] = []
        """Every resource registered, in order (type ``typ``, ``name``, ``inputs``, ``provider``)."""
        self.calls: list[str] = []
        """The token of every invoke answered, in order."""

    def new_resource(self, args: _mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        state = dict(args.inputs)
        if args.typ != STACK_REFERENCE and (fn := self.computed.get(args.typ)) is not None:
            state.update(fn(args.name, args.inputs))
        return f"{args.name}-id", state

    def call(self, args: _mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        fn = self.invokes.get(args.token)
        if fn is None:
            if self.strict:
                raise UnknownInvokeError(
                    f"GpuClusterMocks({self.cloud!r}): no answer for the invoke {args.token}; answer it in a "
                    "subclass's call() (and call super() for the rest), or pass strict=False for {}"
                )
            return {}, []
        self.calls.append(args.token)
        return fn(args.args), []

    def of_type(self, type_token: str) -> list[_mocks.MockResourceArgs]:
        return [r for r in self.resources if r.typ == type_token]
