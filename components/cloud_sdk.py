"""The provider SDKs a cloud's components import: each cloud's are that cloud's extra.

The core (pyproject.toml) is Pulumi, its Kubernetes provider and PyYAML; AWS's SDKs
(pulumi-aws, pulumi-aws-native) are the ``[aws]`` extra, GCP's (pulumi-gcp) the ``[gcp]``
extra, Azure's (pulumi-azure-native) the ``[azure]`` extra, so an AWS-only program carries only
AWS's (bench/install_size.sh measures each). A cloud's package is imported only when a stack asks
for that cloud (gpu_cluster.components.cluster, the in-cluster layer), so a plan never loads another cloud's
SDK; before it is, ``require_cloud_sdk`` makes a stack on a cloud whose SDK is missing stop with
one line that names the package and the command that installs it, and no traceback.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pulumi


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudSdk:
    """The provider SDKs that a cloud needs and the core does not install."""

    modules: tuple[str, ...]
    """The top-level modules its components import."""
    distributions: tuple[str, ...]
    """The packages on PyPI, in the order of ``modules``."""
    extra: str
    """gpu-cluster's extra (pyproject.toml [project.optional-dependencies]) that installs it."""

    @property
    def install(self) -> str:
        return f"pip install 'gpu-cluster[{self.extra}]'"


# cloud -> its SDKs and the extra that installs them (pyproject.toml [project.optional-dependencies]).
EXTRA_SDKS: dict[str, CloudSdk] = {
    "aws": CloudSdk(
        modules=("pulumi_aws", "pulumi_aws_native"), distributions=("pulumi-aws", "pulumi-aws-native"), extra="aws"
    ),
    "gcp": CloudSdk(modules=("pulumi_gcp",), distributions=("pulumi-gcp",), extra="gcp"),
    "azure": CloudSdk(modules=("pulumi_azure_native",), distributions=("pulumi-azure-native",), extra="azure"),
}


class MissingCloudSdk(pulumi.RunError):
    """A stack on a cloud whose SDK is not installed. A ``pulumi.RunError``: Pulumi's Python
    host reports it as an error line, without the program text and stack trace it prints for
    any other exception (pulumi/errors.py, the RunError docstring, pulumi 3.272.0)."""

    def __init__(self, cloud: str, sdk: CloudSdk, missing: tuple[str, ...]) -> None:
        self.cloud = cloud
        self.sdk = sdk
        self.missing = missing
        if len(missing) == 1:
            what = f"the Python package {missing[0]}, which is not installed (it is"
        else:
            what = f"the Python packages {' and '.join(missing)}, which are not installed (they are"
        super().__init__(f"cloud: {cloud} needs {what} gpu-cluster's [{sdk.extra}] extra): run {sdk.install}")


def require_cloud_sdk(cloud: str) -> None:
    """Raise MissingCloudSdk when ``cloud`` needs an extra SDK that cannot be imported here.

    Called before a cloud's package is imported. It looks the module up without importing it
    (``importlib.util.find_spec``: cheap, and an installed but broken SDK still fails as itself
    on import, not as a missing one)."""
    sdk = EXTRA_SDKS.get(cloud)
    if sdk is None:
        return
    missing = tuple(dist for mod, dist in zip(sdk.modules, sdk.distributions) if not _importable(mod))
    if missing:
        raise MissingCloudSdk(cloud, sdk, missing)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a meta-path finder that refuses the module (how the tests hide one)
        return False
