"""gpu-cluster: one installed name for the whole toolkit.

``gpu_cluster.components`` (the Pulumi component, its spec, catalog and plan),
``gpu_cluster.workloads`` (the jobs and the validation), ``gpu_cluster.policies`` (the policy
pack) and ``gpu_cluster.heal``. In a checkout those three live at the repository's top
(``components/``, ``workloads/``, ``policies/``, as the product's layout has them) and this
package reaches them through links of the same names; the wheel installs them here
(pyproject's ``package-dir``).

``from gpu_cluster import GpuCluster, GpuClusterArgs`` imports the component, and with it Pulumi,
only when one of those names is asked for, so ``gpu-cluster --help`` loads neither torch nor Pulumi.
The ``gpu-cluster`` command is :mod:`gpu_cluster.cli`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_cluster.components.args import GpuClusterArgs
    from gpu_cluster.components.cluster import GpuCluster
    from gpu_cluster.components.testing import GpuClusterMocks

__all__ = ["GpuCluster", "GpuClusterArgs", "GpuClusterMocks"]

_LAZY = {
    "GpuCluster": "gpu_cluster.components.cluster",
    "GpuClusterArgs": "gpu_cluster.components.args",
    "GpuClusterMocks": "gpu_cluster.components.testing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_cluster' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
