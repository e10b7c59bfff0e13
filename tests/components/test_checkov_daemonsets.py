"""Checkov's Kubernetes scan of the node DaemonSets every bundled stack declares (GKE's NCCL
installer and NRI device injector, AKS's amdgpu installer): each check a DaemonSet fails on purpose
carries Checkov's own skip annotation with its reason, so Checkov reports it SKIPPED, and NET_RAW
(CKV_K8S_28) and the high UID (CKV_K8S_40) are among them with reasons of their own (issue 43).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.checkov_venv import checkov_exe
from tests.components.aws._offline import run

STACKS = ("gcp-h100-gke", "azure-mi300x-aks")
DS = "kubernetes:apps/v1:DaemonSet"


def test_each_daemonsets_deliberate_failures_are_skipped_with_their_own_reason(tmp_path: Path) -> None:
    waived: dict[str, dict[str, str]] = {}
    for stack in STACKS:
        docs = [r.inputs for r in run(stack)[0].of_type(DS)]
        for d in docs:
            waived[d["metadata"]["name"]] = dict(
                v.split("=", 1) for k, v in d["metadata"]["annotations"].items() if k.startswith("checkov.io/skip")
            )
        (tmp_path / f"{stack}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert set(waived) == {"nccl-tcpxo-installer", "device-injector", "install-amdgpu-driver"}
    for name, checks in waived.items():
        assert {"CKV_K8S_28", "CKV_K8S_40"} <= set(checks), name
        # A reason of its own: not empty and not another check's reason copied.
        assert checks["CKV_K8S_28"] != checks["CKV_K8S_40"] and all(len(w) > 20 for w in checks.values()), name
    proc = subprocess.run(
        [str(checkov_exe()), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    results = (out[0] if isinstance(out, list) else out)["results"]
    assert not results["parsing_errors"]
    got: dict[str, dict[str, set[str]]] = {"skipped": {}, "failed": {}}
    for key in got:
        for c in results[f"{key}_checks"]:
            kind, _, rest = c["resource"].partition(".")
            if kind == "DaemonSet":
                got[key].setdefault(rest.split(".")[-1], set()).add(c["check_id"])
    for name, checks in waived.items():
        assert set(checks) <= got["skipped"].get(name, set()), (
            name,
            sorted(set(checks) - got["skipped"].get(name, set())),
        )
        assert not set(checks) & got["failed"].get(name, set()), name
