"""gpu-cluster's security policy pack: rules in ``policies.rules``, the CrossGuard adapters in
``policies.crossguard``, the offline check in ``policies.offline``; the pack itself is built only
in ``policies/__main__.py`` (``PolicyPack()`` serves gRPC forever, so nothing else may build it)."""
