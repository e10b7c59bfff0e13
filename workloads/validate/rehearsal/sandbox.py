"""Running the declared job here in private mount, network, UTS and PID namespaces under its own
user, capabilities and volumes, and reading from what it left whether every rank reached its
first collective.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.runtime.device import REHEARSAL_MARKS_ENV
from gpu_cluster.workloads.validate.rehearsal.job import REPO, Declared
from gpu_cluster.workloads.validate.rehearsal.stand_in import stand_in_node


EXIT_PASS, EXIT_FAIL, EXIT_COULD_NOT = 0, 2, 3


# The Kubernetes default when a container drops nothing: the runtime's default set, which the
# rehearsal does not model (every bundled pod drops ALL).
LUSTRE_MODE, EMPTYDIR_MODE = 0o755, 0o777


def _bind_keep(keep: Path, at: Path) -> list[str]:
    """Shell lines that show ``keep`` read-only at ``at``. A bind mount carries the folder's own
    mode, and ``mktemp -d`` makes a clone's folder 0700, which a job running as another user
    cannot enter: such a folder gets a 0755 tmpfs of its own at ``at`` with each entry bound in."""
    q = shlex.quote
    if keep.stat().st_mode & 0o005 == 0o005:
        return [
            f"mkdir -p {q(str(at))}",
            f"mount --bind {q(str(keep))} {q(str(at))}",
            f"mount -o remount,bind,ro {q(str(at))}",
        ]
    lines = [f"mkdir -p {q(str(at))}", f"mount -t tmpfs -o mode=0755 tmpfs {q(str(at))}"]
    for entry in sorted(keep.iterdir()):
        dest = at / entry.name
        make = f"mkdir -p {q(str(dest))}" if entry.is_dir() else f"touch {q(str(dest))}"
        lines += [make, f"mount --bind {q(str(entry))} {q(str(dest))}", f"mount -o remount,bind,ro {q(str(dest))}"]
    return lines


def _setup_script(d: Declared, image: Path, layer: Path) -> str:
    """Bash, run as root inside fresh mount, network, UTS and PID namespaces: the overlay root
    (the stand-in image layer over this machine's /), the volumes, then the job under its user,
    groups and capabilities."""
    q = shlex.quote
    root = layer / "root"
    lines = [
        "set -euo pipefail",
        "ip link set lo up",
        f"hostname {q(d.hostname)}",
        # tmpfs under the writable layer: an overlay's upper directory must not be on an overlay.
        f"mount -t tmpfs tmpfs {q(str(layer))}",
        f"mkdir -p {q(str(layer / 'upper'))} {q(str(layer / 'work'))} {q(str(root))}",
        # The image layer too: overlay refuses a lower layer inside another (this one is under /).
        f"cp -a {q(str(image))} {q(str(layer / 'image'))}",
        f"mount -t overlay overlay -o lowerdir={q(str(layer / 'image'))}:/,upperdir={q(str(layer / 'upper'))},"
        f"workdir={q(str(layer / 'work'))} {q(str(root))}",
    ]
    for v in d.volumes:
        target = root / v.target.lstrip("/")
        lines.append(f"mkdir -p {q(str(target))}" if v.kind != "script" else f"touch {q(str(target))}")
        lines.append(f"mount --bind {q(str(v.source))} {q(str(target))}")
        if v.read_only:
            lines.append(f"mount -o remount,bind,ro {q(str(target))}")
    for fs in ("proc", "sys", "dev"):
        lines.append(f"mount --rbind /{fs} {q(str(root / fs))}")
    if d.nics:
        net = root / "sys" / "class" / "net"
        lines.append(f"mount -t tmpfs tmpfs {q(str(net))}")
        for name, driver in d.nics:
            lines += [
                f"mkdir -p {q(str(net / '.drivers' / driver))} {q(str(net / name / 'device'))}",
                f"ln -s {q('/sys/class/net/.drivers/' + driver)} {q(str(net / name / 'device' / 'driver'))}",
            ]
    if not d.read_only_root and not any(v.target == "/tmp" for v in d.volumes):
        # The writable layer's own /tmp, not this machine's; under a read-only root it stays read-only.
        lines.append(f"mount -t tmpfs -o mode=1777 tmpfs {q(str(root / 'tmp'))}")
        # What stands in for the image's interpreter (this project's virtualenv, and the checkout
        # its editable install points at) stays visible when it lives under this machine's /tmp
        # (a CI clone may): read-only, at the same path.
        keeps = {Path(sys.prefix).resolve(), REPO}
        if d.interpreter is not None:
            interp = d.interpreter
            keeps.add(interp.prefix)
            if not interp.python.parent.is_relative_to(interp.prefix):
                keeps.add(interp.python.parent)  # a wrapper script outside its interpreter's prefix
        for keep in sorted(keeps):
            if keep.is_relative_to("/tmp"):
                lines += _bind_keep(keep, root / keep.relative_to("/"))
    if d.read_only_root:
        lines.append(f"mount -o remount,ro {q(str(root))}")
    caps = ",".join(f"+{c}" for c in d.caps)
    priv = [
        "setpriv",
        f"--reuid={d.uid}",
        f"--regid={d.gid}",
        f"--groups={','.join(map(str, d.groups))}" if d.groups else "--clear-groups",
        "--inh-caps=-all",
        f"--bounding-set=-all{',' + caps if caps else ''}",
        *(["--no-new-privs"] if d.no_new_privs else []),
        "--",
        "env",
        "-i",
        f"--chdir={d.workdir}",
        *[f"{k}={v}" for k, v in d.env.items()],
        *d.argv,
    ]
    lines.append(f"exec chroot {q(str(root))} " + " ".join(q(p) for p in priv))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int
    lines: list[str]


def rehearse_declared(
    d: Declared, outs: ClusterOutputs, run_dir: str, stage: Path, ranks: int, timeout_s: float
) -> Outcome:
    marks = f"{run_dir.rstrip('/')}/rehearsal"
    d.env[REHEARSAL_MARKS_ENV] = marks
    image = stage / "image"
    for v in d.volumes:
        v.source.mkdir(parents=True, exist_ok=True) if v.kind != "script" else None
        if v.kind == "lustre":
            os.chown(v.source, 0, 0)
            v.source.chmod(LUSTRE_MODE)
        elif v.kind == "emptydir":
            v.source.chmod(EMPTYDIR_MODE)
    stand_in_node(d, outs, image, stage, ranks)
    (image / "etc").mkdir(parents=True, exist_ok=True)
    (image / "etc" / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"127.0.0.1 {h}\n" for h in d.hosts))
    # The image's interpreter is under /root here (pyenv): the image layer opens it to any user.
    (image / "root").mkdir(exist_ok=True)
    (image / "root").chmod(0o711)
    job = stage / "job.sh"
    job.write_text(_setup_script(d, image, stage / "layer"))
    (stage / "layer").mkdir(exist_ok=True)
    log = stage / "job.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--net",
                "--uts",
                "--pid",
                "--fork",
                "--mount-proc",
                "bash",
                str(job),
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        reached = _wait(proc, lambda: _marks(d, marks), lambda: bool(_marks(d, marks, "failed")), ranks, timeout_s)
    text = log.read_text(errors="replace")
    failed = [json.loads(p.read_text())["failed"] for p in _marks(d, marks, "failed")]
    if failed:
        reached = []
    return _judge(reached, proc.returncode, text, ranks, run_dir, d, failed[0] if failed else None)


def _marks(d: Declared, marks: str, kind: str = "first-collective") -> list[Path]:
    """The rank records (``first-collective`` or ``failed``) on the Lustre stand-in (the run
    directory is under the mount)."""
    for v in d.volumes:
        if v.kind == "lustre" and marks.startswith(v.target.rstrip("/") + "/"):
            return sorted((v.source / os.path.relpath(marks, v.target)).glob(f"{kind}-rank*.json"))
    return []


def _wait(
    proc: subprocess.Popen[bytes],
    marks: Callable[[], list[Path]],
    failed: Callable[[], bool],
    ranks: int,
    timeout_s: float,
) -> list[Path]:
    """Until every rank recorded its first collective or one recorded why it could not (then the
    job is ended there), or the job ended on its own, or ``timeout_s`` passed (a hang: the job is
    ended and fails)."""
    deadline = time.monotonic() + timeout_s
    found: list[Path] = []
    while proc.poll() is None and time.monotonic() < deadline:
        found = marks()
        if len(found) >= ranks or failed():
            break
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return found or marks()


_NOISE = re.compile(r"^(\*+|Setting OMP_NUM_THREADS.*|\s*)$")


def _judge(
    reached: list[Path], rc: int | None, log: str, ranks: int, run_dir: str, d: Declared, failed: str | None = None
) -> Outcome:
    said = [f"stand-in: {s}" for s in d.said]
    if len(reached) >= ranks:
        ranks_seen = [json.loads(p.read_text()) for p in reached]
        return Outcome(
            EXIT_PASS,
            [
                *said,
                f"rehearsal passed: {len(reached)} rank(s) reached their first collective as uid "
                f"{ranks_seen[0]['uid']} and wrote {run_dir}",
            ],
        )
    errors = [ln for ln in log.splitlines() if not _NOISE.match(ln)]
    cause = failed or _cause(errors)
    how = f"exit {rc}" if rc is not None and rc >= 0 else "ended by the rehearsal"
    return Outcome(
        EXIT_FAIL,
        [
            *said,
            f"rehearsal failed: the job stopped before its first collective ({how}): {cause}",
            *errors[-15:],
        ],
    )


_CAUSES = re.compile(
    r"(Permission denied|Read-only file system|no interpreter >= |FabricCheckFailed|fabric check on|"
    r"No such file or directory|not found|Error|error:)"
)


def _cause(lines: list[str]) -> str:
    """The job's own first line that says why, quoted."""
    for ln in lines:
        if _CAUSES.search(ln) and "rehearsal scontrol" not in ln and "fabric check failed on a node above" not in ln:
            return ln.strip()
    return lines[-1].strip() if lines else "(the job printed nothing)"
