"""gpu-cluster's security policy pack: rules in ``gpu_cluster.policies.rules``, the CrossGuard adapters in
``gpu_cluster.policies.crossguard``, the offline check in ``gpu_cluster.policies.offline``; the pack itself is built only
in ``policies/__main__.py`` (``PolicyPack()`` serves gRPC forever, so nothing else may build it)."""
