#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real (Slurm, munge, ffmpeg, chromium, Prometheus and its
# node exporter), only when they are missing.
set -euo pipefail
need=()
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
command -v ffmpeg >/dev/null || need+=(ffmpeg)
# a real browser opens the validation report page (tests/workloads/test_report_html.py)
command -v chromium >/dev/null || need+=(chromium)
# the validation's metrics read by the real programs (tests/workloads/test_metrics_export.py):
# promtool and a Prometheus server, the node exporter's textfile collector
command -v prometheus >/dev/null && command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
# the Kubernetes stacks' route: the judge's and heal's pushes to a real Pushgateway
# (tests/workloads/test_metrics_push.py, tests/heal/test_publish.py)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
if [ ${#need[@]} -eq 0 ]; then
  echo "system packages present: slurm-wlm, munge, ffmpeg, chromium, prometheus, prometheus-node-exporter, prometheus-pushgateway"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]}; run as root: apt-get install ${need[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
