"""EFA throughput on PCS: the EFA devices' byte counters, written as Prometheus counters into the node
exporter's textfile directory (components/contract.py METRICS_TEXTFILE_DIR), which the PCS boot script
already serves (components/aws/slurm_metrics.py). Pure: strings only.

Why a script of our own: EFA's counters are files in ``/sys/class/infiniband/<device>/ports/<port>/
hw_counters/`` (``rx_bytes``, ``tx_bytes``, ``rx_pkts``, ...: aws-samples/awsome-distributed-training
``4.validation_and_observability/3.efa-node-exporter/class_amazon_efa.go``, the struct
``AmazonEfaCounters`` and ``parseAmazonEfaCounters``, read at 054d5d4), which the node exporter's own
``infiniband`` collector does not read (components/dashboard.py, "Fabric panels"), and AWS's EFA
exporter has no public image. Each counter file holds one unsigned decimal (the same file's
``parseUInt64``).

How it runs: a systemd timer on the node (``gpu-cluster-efa.timer``) starts the one-shot service
``gpu-cluster-efa.service`` at boot and every :data:`INTERVAL` after the service last started
(systemd.timer(5): ``OnBootSec=`` with ``OnUnitActiveSec=`` "elapses in regular intervals and
activates a specific service each time"; a timer ``foo.timer`` activates ``foo.service``;
``AccuracySec=`` "defaults to 1 minute", so it is set to one second, or the timer would coalesce to
a minute; systemd 252, Debian 12's man page, and manpages.ubuntu.com/manpages/noble/man5/
systemd.timer.5.html, systemd 255, read 2026-12-07). ``WantedBy=timers.target`` is how
systemd.special(7) asks an application's timer to be pulled in at boot. Unit files under
/etc/systemd/system survive a reboot, unlike a transient ``systemd-run`` timer.

The file is written atomically as the node exporter's README asks of the textfile collector: to a
temporary name in the same directory that does not end in ``.prom`` (the collector reads only
``*.prom``), then renamed (prometheus/node_exporter README.md lines 324-340 at v1.12.1, 6044da7).

The series: ``gpu_cluster_efa_rx_bytes_total`` and ``gpu_cluster_efa_tx_bytes_total`` with labels
``device`` and ``port`` (the labels the node exporter's ``infiniband`` collector uses for the same
tree), counters in bytes; the scrape adds the host's ``node`` (the node-exporter job's relabelling).
"""

from __future__ import annotations

from gpu_cluster.components.contract import METRICS_TEXTFILE_DIR

TEXTFILE = "gpu-cluster-efa.prom"
RX_BYTES = "gpu_cluster_efa_rx_bytes_total"
TX_BYTES = "gpu_cluster_efa_tx_bytes_total"
# metric -> the hw_counters file it copies (class_amazon_efa.go, module docstring).
COUNTERS: dict[str, str] = {RX_BYTES: "rx_bytes", TX_BYTES: "tx_bytes"}
HELP: dict[str, str] = {
    RX_BYTES: "Bytes the EFA device port received (sysfs hw_counters/rx_bytes).",
    TX_BYTES: "Bytes the EFA device port transmitted (sysfs hw_counters/tx_bytes).",
}
SCRIPT_PATH = "/usr/local/sbin/gpu-cluster-efa-textfile"
UNIT = "gpu-cluster-efa"
UNIT_DIR = "/etc/systemd/system"
# Half the node collector's 30 s scrape (components/aws/slurm_metrics.py SCRAPE_INTERVAL), so every
# scrape sees a fresh file.
INTERVAL = "15s"
HEREDOC = "GPU_CLUSTER_EFA"


def script() -> str:
    """The writer, POSIX sh: ``gpu-cluster-efa-textfile [SYSFS_ROOT] [DIRECTORY]`` (``/sys`` and the
    textfile directory by default). A port whose counter is missing or not a number is left out; a
    node with no EFA device gets an empty file, which the collector reads as no series."""
    families = "\n".join(f'  family {m} {f} "{HELP[m]}"' for m, f in COUNTERS.items())
    return f"""#!/bin/sh
# gpu-cluster: EFA byte counters for the node exporter's textfile collector
# (components/aws/efa_textfile.py).
set -u
sys=${{1:-/sys}}
dir=${{2:-{METRICS_TEXTFILE_DIR}}}
tmp="$dir/.{TEXTFILE}.$$"
family() {{
  samples=""
  for f in "$sys"/class/infiniband/*/ports/*/hw_counters/"$2"; do
    [ -r "$f" ] || continue
    v=$(cat "$f" 2>/dev/null) || continue
    case $v in ''|*[!0-9]*) continue ;; esac
    p=${{f%/hw_counters/*}}
    d=${{p%/ports/*}}
    samples="$samples$1{{device=\\"${{d##*/}}\\",port=\\"${{p##*/}}\\"}} $v
"
  done
  [ -n "$samples" ] || return 0
  printf '# HELP %s %s\\n# TYPE %s counter\\n%s' "$1" "$3" "$1" "$samples"
}}
{{
{families}
}} > "$tmp" && mv -f "$tmp" "$dir/{TEXTFILE}" || {{ rm -f "$tmp"; exit 1; }}
"""


def units() -> dict[str, str]:
    """The service and its timer, file name -> text (module docstring)."""
    return {
        f"{UNIT}.service": f"""[Unit]
Description=gpu-cluster: EFA byte counters into the node exporter's textfile directory

[Service]
Type=oneshot
ExecStart={SCRIPT_PATH} /sys {METRICS_TEXTFILE_DIR}
""",
        f"{UNIT}.timer": f"""[Unit]
Description=gpu-cluster: EFA byte counters every {INTERVAL}

[Timer]
OnBootSec={INTERVAL}
OnUnitActiveSec={INTERVAL}
AccuracySec=1s

[Install]
WantedBy=timers.target
""",
    }


def install_lines(log: str = "log") -> str:
    """The boot script's lines: the writer, its units, the timer enabled and started. ``log`` is the
    script's logging function; a failure is logged and the boot goes on. The here-documents end at
    their own word, not the ``EOF`` the collector's configuration uses."""
    parts = [f"cat > {SCRIPT_PATH} <<'{HEREDOC}'\n{script()}{HEREDOC}", f"chmod 0755 {SCRIPT_PATH}"]
    for name, text in units().items():
        parts.append(f"cat > {UNIT_DIR}/{name} <<'{HEREDOC}'\n{text}{HEREDOC}")
    parts.append(
        f'systemctl daemon-reload && systemctl enable --now {UNIT}.timer || {log} "the EFA counters timer did not start"'
    )
    return "\n".join(parts) + "\n"
