"""The node exporter's textfile collector on the Slurm stacks' GPU nodes: how the validation's figures
(gpu_cluster.workloads.validate.metrics_export) reach the store the node's exporters are already scraped
into. Shared by the PCS and Azure Slurm boot scripts (components/aws/slurm_metrics.py,
components/azure/slurm_metrics.py). Pure: strings only.
"""

from __future__ import annotations

from typing import Any

from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR

# The validation's figures (components/contract.py METRICS_TEXTFILE_DIR) through the node exporter's
# textfile collector (README.md lines 324-340 at v1.12.1). The container sees the host's root at
# /host (the README's ``-v "/:/host:ro,rslave"``) and the collector reads its directory as given, with
# no --path.rootfs prefix (collector/textfile.go at v1.12.1 takes the flag's paths as they are).
TEXTFILE_FLAG = f"--collector.textfile.directory=/host{METRICS_TEXTFILE_DIR}"
# Any job's user writes there (the judge runs as whoever submitted the run): the figures are the
# cluster's own, and one who could write false ones could as well run a false validation.
TEXTFILE_MODE = "0777"

# The validation's series carry their own ``node`` (the node judged, not the host that served the
# file): honor_labels keeps the scraped value where the target's relabelled ``node`` would
# otherwise rename it to ``exported_node`` (prometheus/prometheus docs/configuration/configuration.md
# at 1e317d0, scrape_config ``honor_labels``). The node exporter's own series have no ``node`` label,
# so they still take the host's. The collector's prometheus receiver takes Prometheus's scrape_config.
NODE_EXPORTER_JOB_EXTRA: dict[str, Any] = {"honor_labels": True}
