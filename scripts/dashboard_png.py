"""Draws dashboards/gpu-grafana.json as a picture for docs/day2.md: each panel where its gridPos
puts it, with its title, its PromQL and its unit. It is drawn from the JSON alone, with no cluster
behind it, so the charts are empty: the picture shows what the dashboard holds, not data.

    PYTHONPATH=. python scripts/dashboard_png.py [dashboards/gpu-grafana.json] [docs/images/gpu-dashboard.png]
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = 24  # Grafana's grid (the JSON model's gridPos)


def render(dashboard: dict, out: Path) -> None:
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(16, rows * 0.42 + 0.8), facecolor="#111217")
    fig.suptitle(dashboard["title"], color="white", fontsize=15, x=0.01, ha="left")
    top = 1 - 0.8 / (rows * 0.42 + 0.8)
    for p in panels:
        g = p["gridPos"]
        left, width = g["x"] / COLUMNS, g["w"] / COLUMNS
        height = g["h"] / rows * top
        bottom = top - (g["y"] + g["h"]) / rows * top
        ax = fig.add_axes((left + 0.008, bottom + 0.02, width - 0.016, height - 0.045), facecolor="#181b1f")
        ax.set_title(p["title"], color="white", fontsize=10, loc="left")
        ax.set_xticks([])
        ax.set_yticks([])
        for s in ax.spines.values():
            s.set_color("#2c3235")
        expr = "\n".join(textwrap.wrap(p["targets"][0]["expr"], 70))
        ax.text(
            0.5,
            0.55,
            expr,
            color="#8ab8ff",
            family="monospace",
            fontsize=8,
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.text(
            0.5,
            0.2,
            f"unit: {p['fieldConfig']['defaults']['unit']} · legend: {p['targets'][0]['legendFormat']} · no data (drawn from the JSON)",
            color="#9fa7b3",
            fontsize=7,
            ha="center",
            transform=ax.transAxes,
        )
    fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())
    plt.close(fig)


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dashboards" / "gpu-grafana.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "images" / "gpu-dashboard.png"
    render(json.loads(src.read_text()), dst)
    print(dst)
