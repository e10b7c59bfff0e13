"""The certificate's record of each incident: heal adds ``incidents`` to the report.json that named
the nodes, and an "Incidents" section to its report.md (replacing an earlier one), so the report
says what became of every node it FAILed; ``validate diff`` reads them from there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpu_cluster.heal.evidence import Evidence
from gpu_cluster.heal.journal import Incident, Journal
from gpu_cluster.heal.states import State


def summary(inc: Incident) -> dict[str, Any]:
    first = inc.entries[0]
    tries = [e for e in inc.entries if e.state is State.REPLACING and e.event == "intent"]
    return {
        "incident": inc.incident,
        "slot": inc.slot,
        "node": inc.node,
        "first_node": first.node,
        "why": inc.fact("why", ""),
        "state": inc.state.value,
        "detail": inc.last.detail,
        "opened": first.to_json()["time"],
        "updated": inc.last.to_json()["time"],
        "replacements": len(tries),
        "call": inc.fact("call", ""),
        "old_instance": tries[0].extra.get("old_instance", "") if tries else "",
        "new_instance": inc.fact("new_instance", "") if tries else "",
        "peer": inc.fact("peer", ""),
        "figures": inc.fact("figures", {}) if inc.state is State.HEALTHY else {},
        "check_report": inc.fact("check_report", ""),
    }


def record(journal: Journal, ev: Evidence, run_dir: Path) -> list[Path]:
    from gpu_cluster.workloads.validate.certificate import INCIDENTS, render_incidents

    mine = [summary(i) for i in journal.incidents() if i.fact("report_id") == ev.report_id]
    if not mine:
        return []
    doc = json.loads(ev.path.read_text(encoding="utf-8"))
    doc["incidents"] = mine
    written = [_atomic(ev.path, json.dumps(doc, indent=2) + "\n")]
    md = ev.path.with_name("report.md")
    if md.exists():
        body = md.read_text(encoding="utf-8").split("\n" + INCIDENTS)[0].rstrip("\n")
        written.append(_atomic(md, body + "\n" + "\n".join(render_incidents(mine)) + "\n"))
    page = ev.path.with_name("report.html")
    if page.exists():
        from gpu_cluster.workloads.validate.report_html import with_incidents

        try:
            written.append(_atomic(page, with_incidents(page.read_text(encoding="utf-8"), mine)))
        except ValueError:
            pass  # a page of another make (no incidents markers): report.json and report.md carry them
    written.append(_atomic(run_dir / "heal.json", json.dumps({"report": str(ev.path), "incidents": mine}, indent=2)))
    return written


def _atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
