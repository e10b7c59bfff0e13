"""Slurm nodes: what the batch script needs on its node against what the node image and the
stack's user data put there (issue 44 item 6).

The GPU metrics exporter (issue 46): where the plan creates a GPU dashboard, every GPU node must
start what feeds it at boot, and on Slurm nothing but the node's boot script (a launch template's user
data, a scale set's custom data, a Cluster Director node set's startup script) can start it.

The interpreter: the script tries its candidates in order and runs on the first that is at least
its minimum version, and stops on every node where none is (workloads/launch/slurm_env.py). A
candidate is on the node when the node image has it (a cited fact of that image) or the user data
of the node group's launch template installs it. The plugin and library paths are the node-image
checks (node_image.py, against the image's cited manifest).
"""

from __future__ import annotations

import base64
import binascii
import re

from gpu_cluster.components.liveness import facts
from gpu_cluster.components.liveness.model import Check, Job, Plan
from gpu_cluster.components.liveness.node_image import node_image_name
from gpu_cluster.components.liveness.pools import AZURE_VMSS, CD_CLUSTER, PCS_GROUP, Pool

# A package manager installing versioned interpreters: ``dnf install -y python3.12``.
_INSTALL = re.compile(r"\b(?:dnf|yum|apt-get|apt)\s+install\b([^|;&\n]*)")
_VERSIONED = re.compile(r"^python(\d+)\.(\d+)$")
# A file system the user data mounts: an fstab line (``<src> /fsx lustre ...``) or ``mount /fsx``.
_FSTAB = re.compile(r"\s(/[\w./-]*)\s+(?:lustre|nfs4?|fuse\.\w+)\s")
_MOUNT = re.compile(r"\bmount\s+(?:-\S+\s+)*(/[\w./-]*)")


def _decoded(raw: str) -> str:
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return raw


def user_data(plan: Plan, pool: Pool) -> str | None:
    """The decoded user data of the pool's launch template (PCS) or the custom data of its scale set
    (Azure), None where the plan has none."""
    for r in plan.of(AZURE_VMSS):
        if r.name == pool.name:
            os_profile = (r.inputs.get("virtualMachineProfile") or {}).get("osProfile") or {}
            raw = str(os_profile.get("customData") or "")
            return _decoded(raw) if raw else None
    for r in plan.of(PCS_GROUP):
        if str(r.inputs.get("name", r.name)) != pool.name:
            continue
        lt = plan.ref((r.inputs.get("customLaunchTemplate") or {}).get("templateId"))
        raw = str((lt.inputs if lt else {}).get("userData") or "")
        if not raw:
            return None
        try:
            return base64.b64decode(raw, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return raw
    return None


# The dashboards a plan may create over its nodes' GPU metrics (components/gcp/dashboard.py,
# components/aws/grafana.py, components/azure/grafana.py).
DASHBOARDS = (
    "gcp:monitoring/dashboard:Dashboard",
    "aws:grafana/workspace:Workspace",
    "azure-native:dashboard:Grafana",
)
# What a boot script starts that exports the GPUs' metrics: the Ops Agent's DCGM receiver in the
# agent's configuration (components/gcp/slurm_metrics.py ops_agent_config), or NVIDIA's DCGM exporter.
_EXPORTERS = (
    (re.compile(r"^\s*type: dcgm\s*$", re.M), "the Ops Agent's DCGM receiver", "components/gcp/slurm_metrics.py"),
    (
        re.compile(r"^\s*docker run\b.*\bdcgm-exporter\b", re.M),
        "NVIDIA's DCGM exporter",
        "components/aws/slurm_metrics.py; components/azure/slurm_metrics.py",
    ),
)


def boot_script(plan: Plan, pool: Pool) -> tuple[str, str] | None:
    """What runs on every node of ``pool`` at boot and where the plan says so: its user data (PCS,
    Azure) or its Cluster Director node set's ``startupScript``; None where the plan has none."""
    data = user_data(plan, pool)
    if data is not None:
        return data, f"the user data of {pool.resource}"
    for r in plan.of(CD_CLUSTER):
        for n in ((r.inputs.get("orchestrator") or {}).get("slurm") or {}).get("nodeSets") or []:
            script = (n.get("computeInstance") or {}).get("startupScript")
            if script and pool.resource.endswith(f" {n.get('id')}"):
                return str(script), f"{r.name} orchestrator.slurm.nodeSets[{n.get('id')}].computeInstance.startupScript"
    return None


def exporter_check(plan: Plan, pool: Pool | None) -> list[Check]:
    """Where the plan creates a GPU dashboard: the GPU pool's boot script starts an exporter."""
    if pool is None or not pool.gpu or not plan.of(*DASHBOARDS):
        return []
    obj = f"GPU nodes of {pool.resource}"
    check = "a GPU metrics exporter starts at boot (the plan's dashboard reads it)"
    found = boot_script(plan, pool)
    text, where = found if found is not None else ("", "")
    for rx, what, src in _EXPORTERS:
        if rx.search(text):
            return [
                Check(kind="node-image", object=obj, check=check, holds=True, why=f"{what}, from {where}", source=src)
            ]
    return [
        Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=False,
            why=f"{where or 'no boot script'} starts no GPU metrics exporter: the dashboard would stay empty",
            source="components/liveness/slurm_node.py",
            fix="add the cloud's metrics agent to the GPU nodes' boot script (docs/day2.md, GPU metrics)",
        )
    ]


# A boot script that starts a dynamic slurmd (``slurmd ... -Z``) and what it passes as ``--conf``.
_DYNAMIC_SLURMD = re.compile(r"\bslurmd\b[^\n]*\s-Z\b[^\n]*")
_CONF_WORDS = re.compile(r"--conf[ =]+\"([^\"]*)\"")


def registration_check(plan: Plan, pool: Pool | None) -> list[Check]:
    """A node that registers itself (a dynamic slurmd, Azure Slurm) registers drained, with the
    registration's reason set after it registers: the Slurm form of the GPU pools' registration
    taint (issue 41, I6). Pools whose node records are made ahead (PCS, Cluster Director) are held
    by heal's reservation instead and get no check here."""
    from gpu_cluster.components.contract import UNVALIDATED_SLURM_REASON

    if pool is None or not pool.gpu:
        return []
    found = boot_script(plan, pool)
    text, where = found if found is not None else ("", "")
    starts = _DYNAMIC_SLURMD.search(text)
    if starts is None:
        return []
    obj = f"GPU nodes of {pool.resource}"
    check = "a node registers drained, unvalidated, until a check passes it"
    src = "components/azure/slurm_config.py REGISTER_DRAINED, registration_reason_lines"
    conf = _CONF_WORDS.search(starts.group(0))
    words = conf.group(1).split() if conf else []
    missing = [
        what
        for what, ok in (
            ("State=DRAIN in slurmd's --conf", "State=DRAIN" in words),
            (f"the reason {UNVALIDATED_SLURM_REASON!r} set after registration", UNVALIDATED_SLURM_REASON in text),
        )
        if not ok
    ]
    if not missing:
        why = f"slurmd -Z --conf {' '.join(words)!r} and the registration reason, from {where}"
        return [Check(kind="node-image", object=obj, check=check, holds=True, why=why, source=src)]
    return [
        Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=False,
            why=f"{where} starts a dynamic slurmd without {' and without '.join(missing)}: a new or replaced "
            "node takes user jobs before any check",
            source=src,
            fix='register the nodes drained: slurmd -Z --conf "... State=DRAIN" and the registration reason '
            "(components/azure/slurm_config.py node_script)",
        )
    ]


def installed(text: str) -> dict[str, tuple[int, int]]:
    """Versioned interpreters a script installs with a package manager: name -> version."""
    out: dict[str, tuple[int, int]] = {}
    for m in _INSTALL.finditer(text):
        for word in m.group(1).split():
            v = _VERSIONED.match(word)
            if v:
                out[word] = (int(v.group(1)), int(v.group(2)))
    return out


def mounts(plan: Plan, pool: Pool) -> tuple[list[str], str] | None:
    """The directories every node of ``pool`` mounts a file system at, and where that is read; None
    where the plan does not say (no user data, no storage config)."""
    data = user_data(plan, pool)
    if data is not None:
        found = [m.group(1) for rx in (_FSTAB, _MOUNT) for m in rx.finditer(data)]
        return sorted(set(found)), f"the user data of {pool.resource}"
    for r in plan.of(CD_CLUSTER):
        sets = ((r.inputs.get("orchestrator") or {}).get("slurm") or {}).get("nodeSets") or []
        for n in sets:
            if pool.resource.endswith((f" {n.get('id')}", f" {n.get('computeId')}")):
                found = [str(c.get("localMount")) for c in n.get("storageConfigs") or [] if c.get("localMount")]
                return sorted(set(found)), f"{r.name} orchestrator.slurm.nodeSets[{n.get('id')}].storageConfigs"
    return None


def mount_check(plan: Plan, pool: Pool | None, job: Job) -> list[Check]:
    if not job.workdir:
        return []
    obj = f"batch script {job.name}"
    check = f"the run directory {job.workdir} is on a file system every node mounts"
    src = "workloads/launch/validation.py (the code is unpacked once into the run directory; every node reads it)"
    seen = mounts(plan, pool) if pool is not None else None
    if seen is None:
        return [
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=True,
                why="unverified: the plan says nothing of what the nodes mount",
                source=src,
                unverified=True,
            )
        ]
    dirs, where = seen
    under = [d for d in dirs if job.workdir == d or job.workdir.startswith(d.rstrip("/") + "/")]
    if under:
        return [
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=True,
                why=f"{under[0]}, by {where}",
                source=f"{src}; {where}",
            )
        ]
    return [
        Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=False,
            why=f"{where} mounts {', '.join(dirs) or 'nothing'}: the other nodes never see the code the batch host "
            "unpacks, and each writes its results to its own disk",
            source=f"{src}; {where}",
            fix=f"mount the shared file system on every node (the stack's user data or storage config) at a parent of "
            f"{job.workdir}, or run under one it mounts ({', '.join(dirs) or 'none'})",
        )
    ]


def checks(plan: Plan, pool_list: list[Pool], job: Job) -> list[Check]:
    pool = next((p for p in pool_list if p.partition and p.partition == job.partition), None)
    return [
        *mount_check(plan, pool, job),
        *_interpreter_checks(plan, pool, job),
        *exporter_check(plan, pool),
        *registration_check(plan, pool),
    ]


def _interpreter_checks(plan: Plan, pool: Pool | None, job: Job) -> list[Check]:
    if not job.interpreters:
        return []
    obj = f"batch script {job.name}"
    want = ".".join(map(str, job.python_min))
    check = f"an interpreter >= {want} among {', '.join(job.interpreters)} on the nodes"
    image = node_image_name(plan)
    on_image = facts.NODE_PYTHONS.get(image or "", {})
    data = user_data(plan, pool) if pool is not None else None
    by_data = installed(data) if data else {}
    src = "workloads/launch/slurm_env.py interpreter_lines"
    if not on_image and not by_data:
        return [
            Check(
                kind="node-image",
                object=obj,
                check=check,
                holds=True,
                why="unverified: no cited fact of the node image's interpreters and no interpreter the user data "
                "installs; "
                "the script stops naming what it found where none is new enough",
                source=src,
                unverified=True,
            )
        ]
    seen: list[str] = []
    for cand in job.interpreters:
        name = cand.rsplit("/", 1)[-1]
        if name in by_data:
            version, where = by_data[name], f"the user data of {pool.resource if pool else 'the node group'}"
            where_src = where
        elif name in on_image:
            version, where = on_image[name], f"node image {image}"
            where_src = facts.cite("al2023-python")
        else:
            continue
        seen.append(f"{name} {version[0]}.{version[1]} ({where})")
        if version >= job.python_min:
            return [
                Check(
                    kind="node-image",
                    object=obj,
                    check=check,
                    holds=True,
                    why=f"{name} {version[0]}.{version[1]}, from {where}",
                    source=f"{src}; {where_src}",
                )
            ]
    return [
        Check(
            kind="node-image",
            object=obj,
            check=check,
            holds=False,
            why=f"the nodes have {'; '.join(seen) or 'none of them'}: none is {want} or newer, so the job stops at "
            "start on every node",
            source=f"{src}; {facts.cite('al2023-python')}",
            fix=f"install a python {want} or newer in the node group's user data (e.g. dnf install -y python3.12), "
            "or pass --python with one the node image has",
        )
    ]
