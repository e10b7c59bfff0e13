"""The provider SDK a cloud's components import, where it is an extra rather than the core.

AWS's and GCP's SDKs are core dependencies (pyproject.toml). Azure's, pulumi-azure-native, is
the ``[azure]`` extra: it is larger installed than the rest of the core, so a user who never plans an
Azure stack does not carry it. A cloud's package is imported only when a stack asks for that
cloud (components.cluster, the in-cluster layer), so an AWS or GCP plan never loads Azure's SDK;
before it is, ``require_cloud_sdk`` makes a stack on a cloud whose SDK is missing stop with one
line that names the package and the command that installs it, and no traceback.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pulumi


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudSdk:
    """A provider SDK that a cloud needs and the core does not install."""

    module: str
    """The top-level module its components import."""
    distribution: str
    """The package on PyPI."""
    extra: str
    """gpu-cluster's extra (pyproject.toml [project.optional-dependencies]) that installs it."""

    @property
    def install(self) -> str:
        return f"pip install 'gpu-cluster[{self.extra}]'"


# cloud -> the SDK that is an extra; a cloud not listed is served by the core dependencies.
EXTRA_SDKS: dict[str, CloudSdk] = {
    "azure": CloudSdk(module="pulumi_azure_native", distribution="pulumi-azure-native", extra="azure"),
}


class MissingCloudSdk(pulumi.RunError):
    """A stack on a cloud whose SDK is not installed. A ``pulumi.RunError``: Pulumi's Python
    host reports it as an error line, without the program text and stack trace it prints for
    any other exception (pulumi/errors.py, the RunError docstring, pulumi 3.272.0)."""

    def __init__(self, cloud: str, sdk: CloudSdk) -> None:
        self.cloud = cloud
        self.sdk = sdk
        super().__init__(
            f"cloud: {cloud} needs the Python package {sdk.distribution}, which is not installed "
            f"(it is gpu-cluster's [{sdk.extra}] extra): run {sdk.install}"
        )


def require_cloud_sdk(cloud: str) -> None:
    """Raise MissingCloudSdk when ``cloud`` needs an extra SDK that cannot be imported here.

    Called before a cloud's package is imported. It looks the module up without importing it
    (``importlib.util.find_spec``: cheap, and an installed but broken SDK still fails as itself
    on import, not as a missing one)."""
    sdk = EXTRA_SDKS.get(cloud)
    if sdk is not None and importlib.util.find_spec(sdk.module) is None:
        raise MissingCloudSdk(cloud, sdk)
