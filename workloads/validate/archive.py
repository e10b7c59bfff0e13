"""The report's way home from a pod: the judge prints its files as one archive in its log.

Nothing else leaves a Kubernetes pod once it has ended (its file system is gone, the Lustre
claim is only mounted inside the cluster), but its log stays readable through the API. So on
Kubernetes the judge, after writing the report, prints the run's report files as a base64
tar between two marker lines; ``submit`` reads pod 0's log and unpacks them. On Slurm the run
directory is on the login node's file system and is fetched directly.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path
from typing import TextIO

BEGIN = "----- gpu-cluster report archive begin -----"
END = "----- gpu-cluster report archive end -----"
# The files a person or a later diff wants back; NCCL logs and status files stay on the cluster.
REPORT_FILES = ("report.json", "report.md", "report.html", "busbw.png")


def emit(run_dir: Path, out: TextIO) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name in REPORT_FILES:
            path = run_dir / name
            if path.is_file():
                tar.add(path, arcname=name)
    text = base64.b64encode(raw.getvalue()).decode("ascii")
    out.write(BEGIN + "\n")
    for i in range(0, len(text), 120):
        out.write(text[i : i + 120] + "\n")
    out.write(END + "\n")
    out.flush()


def extract(log: str, dest: Path) -> list[str]:
    """Unpack the archive found in ``log`` into ``dest``; the names unpacked ([] if none)."""
    lines = log.splitlines()
    try:
        start = max(i for i, line in enumerate(lines) if line.strip() == BEGIN)
    except ValueError:
        return []
    body = []
    for line in lines[start + 1 :]:
        if line.strip() == END:
            break
        body.append(line.strip())
    else:
        return []  # cut short: the pod died while printing
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode("".join(body))), mode="r:gz") as tar:
        names = [m.name for m in tar.getmembers() if m.name in REPORT_FILES and m.isfile()]
        tar.extractall(dest, members=[tar.getmember(n) for n in names], filter="data")
    return names
