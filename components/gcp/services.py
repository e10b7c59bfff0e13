"""The Google APIs a stack needs, enabled before anything uses them.

A fresh project has none of them on, and the first resource of each kind would fail with
"API has not been used in project ... or it is disabled". Each API is a ``gcp.projects.Service``;
the rest of the stack waits for all of them through an explicit provider that depends on them
(a provider is inherited by every child resource, ``depends_on`` on a component is not).

``disable_on_destroy=False``: other workloads of the project may use the same APIs, and
turning an API off on ``pulumi destroy`` would break them (cluster-toolkit at 1047080 does the
same, modules/database/redis/main.tf and modules/network/dns-managed-zone/main.tf).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from gpu_cluster.components.gcp.apis import for_orchestrator
from gpu_cluster.components.spec import ClusterSpec


def apis(spec: ClusterSpec) -> tuple[str, ...]:
    return for_orchestrator(spec.orchestration.kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServicesArgs:
    spec: ClusterSpec
    project: pulumi.Input[str]


class ProjectServices(pulumi.ComponentResource):
    """One ``gcp.projects.Service`` per API, and the provider the rest of the stack uses.

    When the caller gave the component a gcp provider, the services are created with it and
    no provider of ours is made (``provider`` is None); the rest of the stack then waits for
    the services through :meth:`after_apis`, the caller's provider being used everywhere."""

    services: list[gcp.projects.Service]
    provider: gcp.Provider | None

    def __init__(self, name: str, args: ServicesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-cluster:gcp:ProjectServices", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        self.services = [
            gcp.projects.Service(
                f"{name}-{api.split('.')[0]}", project=args.project, service=api, disable_on_destroy=False, opts=child
            )
            for api in apis(spec)
        ]
        self.provider = (
            None
            if self.get_provider("gcp:index:x") is not None
            else gcp.Provider(
                f"{name}-provider",
                project=args.project,
                region=spec.region,
                zone=spec.zone,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.services)),
            )
        )
        self.register_outputs({"apis": list(apis(spec))})

    def after_apis(self) -> pulumi.ResourceOptions:
        """Options under which every resource created waits for the APIs: our provider, or
        (with the caller's provider) a transformation, which children inherit, adding the
        services to each resource's ``depends_on`` (a component's own ``depends_on`` is not
        inherited by its children)."""
        if self.provider is not None:
            return pulumi.ResourceOptions(providers=[self.provider])
        services = list(self.services)

        def wait(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
            extra = pulumi.ResourceOptions(depends_on=list(services))
            return pulumi.ResourceTransformationResult(args.props, pulumi.ResourceOptions.merge(args.opts, extra))

        return pulumi.ResourceOptions(transformations=[wait])
