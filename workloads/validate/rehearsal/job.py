"""What the rendered job declares, read from its JobSet (and ConfigMap) or its batch script: the
entry command, user, groups, capabilities, volumes, environment and host names the rehearsal
runs it under.
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_cluster.components.catalog import load_fabric_facts
from gpu_cluster.components.contract import ClusterOutputs


REPO = Path(__file__).resolve().parents[3]


class CouldNotRehearse(RuntimeError):
    """Something the rehearsal cannot stand in for; exit 3."""


@dataclass(frozen=True, slots=True)
class Volume:
    target: str
    """Where the job sees it."""
    source: Path
    """The directory that stands in for it on this machine."""
    kind: str
    """lustre, emptydir, configmap, hostpath."""
    read_only: bool = False


@dataclass(kw_only=True, slots=True)
class Declared:
    """What the rendered job declares, read from the JobSet or the batch script."""

    kind: str
    argv: list[str]
    env: dict[str, str]
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    caps: tuple[str, ...] = ()
    no_new_privs: bool = False
    read_only_root: bool = False
    workdir: str = "/"
    hostname: str = "node-0"
    hosts: tuple[str, ...] = ()
    volumes: list[Volume] = field(default_factory=list)
    nics: tuple[tuple[str, str], ...] = ()
    """Stand-in network interfaces (name, kernel driver) in the job's /sys/class/net."""
    exports: dict[str, str] = field(default_factory=dict)
    """Variables the batch script exports itself (Slurm)."""
    said: list[str] = field(default_factory=list)
    image: str = ""
    """The container's image (Kubernetes); empty on Slurm."""
    interpreter: Interpreter | None = None
    """Kubernetes: the interpreter that stands in for the image's (``--image-python``, e.g. a
    virtualenv with the image's own torch), asked once; None: this project's."""


@dataclass(frozen=True, slots=True)
class Interpreter:
    python: Path
    prefix: Path
    torch: str


def _k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' own expansion of command and args: ``$(VAR)`` of a declared variable, ``$$``
    to ``$`` (Kubernetes docs, "Define a Command and Arguments for a Container")."""
    out = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)
    return out.replace("$$", "$")


def _numeric_user(text: str, where: str) -> tuple[int, int]:
    if text == "root":
        return 0, 0
    uid, _, gid = text.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise CouldNotRehearse(f"{where}: USER {text} is not root or a numeric uid[:gid]")
    return int(uid), int(gid or uid)


def image_user(image: str) -> tuple[int, int] | None:
    """(uid, gid) an image of the catalog runs as: a published one's recorded user, or the last
    ``USER`` of the Dockerfile the catalog builds (root where it has none); None for others."""
    _, images = load_fabric_facts()
    for img in images.values():
        if img.repository in image:
            return _numeric_user(img.user, f"the catalog's image {img.repository}")
        build = img.build
        if build is not None and build.repository in image:
            users = re.findall(r"^USER\s+(\S+)", (REPO / build.dockerfile).read_text(), re.M)
            return _numeric_user(users[-1], build.dockerfile) if users else (0, 0)
    return None


def stack_configmaps(outs: ClusterOutputs) -> dict[str, dict[str, Any]]:
    """The ConfigMaps the stack itself makes for its jobs (not rendered with the job): the size's NCCL
    topology (components/nccl_topology.py), by name."""
    from gpu_cluster.components import nccl_topology

    topo = nccl_topology.for_instance(outs.instance_type)
    if topo is None:
        return {}
    return {
        nccl_topology.CONFIGMAP: {
            "metadata": {"name": nccl_topology.CONFIGMAP},
            "data": {nccl_topology.KEY: topo.xml()},
        }
    }


def from_jobset(
    jobset: dict[str, Any],
    configmap: dict[str, Any] | None,
    stage: Path,
    from_stack: dict[str, dict[str, Any]] | None = None,
) -> Declared:
    rjob = jobset["spec"]["replicatedJobs"][0]
    pod = rjob["template"]["spec"]["template"]
    spec = pod["spec"]
    (c,) = [x for x in spec["containers"] if x["name"] == spec["containers"][0]["name"]]
    csec, psec = c.get("securityContext") or {}, spec.get("securityContext") or {}
    hostname = f"{jobset['metadata']['name']}-{rjob['name']}-0-0"
    subdomain = (jobset["spec"].get("network") or {}).get("subdomain") or jobset["metadata"]["name"]
    d = Declared(kind="kubernetes", argv=[], env={}, hostname=hostname, hosts=(f"{hostname}.{subdomain}", hostname))
    fields = {
        "metadata.name": hostname,
        "metadata.namespace": jobset["metadata"].get("namespace", "default"),
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
        "status.podIP": "127.0.0.1",
        "spec.nodeName": "node-0",
    }
    # What the kubelet and the Job controller give every container of pod 0 of an Indexed Job.
    env = {"HOSTNAME": hostname, "JOB_COMPLETION_INDEX": "0"}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = _k8s_expand(str(e["value"]), env)
        else:
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if path not in fields:
                raise CouldNotRehearse(
                    f"env {e['name']}: valueFrom {e.get('valueFrom')} (allowed: {', '.join(fields)})"
                )
            env[e["name"]] = fields[str(path)]
    d.env = env
    d.argv = [_k8s_expand(str(a), env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    if not d.argv:
        raise CouldNotRehearse("the container declares no command: the image's entry point is not known here")
    d.image = str(c.get("image") or "")
    user = csec.get("runAsUser", psec.get("runAsUser"))
    group = csec.get("runAsGroup", psec.get("runAsGroup"))
    if user is None:
        found = image_user(str(c["image"]))
        if found:
            user, group = found[0], group if group is not None else found[1]
            d.said.append(f"user {user}:{group}: the user the catalog records for {c['image']} (its Dockerfile's USER)")
        else:
            user = 0
            d.said.append(f"user 0: {c['image']} sets none here (published CUDA/NGC images run as root)")
    d.uid, d.gid = int(user), int(group if group is not None else (0 if user == 0 else user))
    d.groups = tuple(
        int(g) for g in [*(psec.get("supplementalGroups") or []), *([psec["fsGroup"]] if "fsGroup" in psec else [])]
    )
    caps = csec.get("capabilities") or {}
    if "ALL" not in [str(x).upper() for x in caps.get("drop") or []]:
        raise CouldNotRehearse(
            "the container keeps the runtime's default capabilities (no drop: [ALL]), which the rehearsal does not model"
        )
    d.caps = tuple(str(x).lower().removeprefix("cap_") for x in caps.get("add") or [])
    d.no_new_privs = csec.get("allowPrivilegeEscalation") is False
    d.read_only_root = bool(csec.get("readOnlyRootFilesystem"))
    d.workdir = str(c.get("workingDir") or "/")
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        if m.get("subPath") or m.get("subPathExpr"):
            raise CouldNotRehearse(f"volumeMount {m['name']}: subPath is not rehearsed")
        v = volumes[m["name"]]
        ro = bool(m.get("readOnly"))
        if "persistentVolumeClaim" in v:
            src = stage / "lustre" / v["persistentVolumeClaim"]["claimName"]
            d.volumes.append(Volume(m["mountPath"], src, "lustre", ro))
        elif "emptyDir" in v:
            d.volumes.append(Volume(m["mountPath"], stage / "empty" / m["name"], "emptydir", ro))
        elif "configMap" in v:
            src = stage / "configmap" / v["configMap"]["name"]
            cm = configmap if configmap and configmap["metadata"]["name"] == v["configMap"]["name"] else None
            cm = cm or (from_stack or {}).get(v["configMap"]["name"])
            if cm is None:
                raise CouldNotRehearse(f"volume {m['name']}: ConfigMap {v['configMap']['name']} is not rendered")
            src.mkdir(parents=True, exist_ok=True)
            for k, text in (cm.get("data") or {}).items():
                (src / k).write_text(text)
            for k, b64 in (cm.get("binaryData") or {}).items():
                (src / k).write_bytes(base64.b64decode(b64))
            for f in src.iterdir():
                f.chmod(0o644)
            d.volumes.append(Volume(m["mountPath"], src, "configmap", True))
        elif "hostPath" in v:
            d.volumes.append(Volume(m["mountPath"], stage / "node" / v["hostPath"]["path"].lstrip("/"), "hostpath", ro))
        else:
            raise CouldNotRehearse(
                f"volume {m['name']}: {sorted(v)} (allowed: persistentVolumeClaim, emptyDir, configMap, hostPath)"
            )
    return d


def from_sbatch(script: str, outs: ClusterOutputs, run_dir: str, stage: Path) -> Declared:
    """The batch script as slurmd runs it on the first node: bash, in ``--chdir``, with Slurm's
    job variables. The submitting user is not in the script; it runs as root here (docs/validate.md)."""
    chdir = re.search(r"^#SBATCH --chdir=(\S+)$", script, re.M)
    if chdir is None:
        raise CouldNotRehearse("the batch script has no #SBATCH --chdir")
    path = stage / "job.sbatch"
    path.write_text(script)
    path.chmod(0o755)
    # What `submit` does on the login node (workloads/validate/slurm.py), then slurmd's start in --chdir.
    run = shlex.quote(chdir.group(1))
    argv = ["/bin/bash", "-c", f"mkdir -p {run} && cd {run} && exec /bin/bash /opt/gpuc-rehearsal/job.sbatch"]
    d = Declared(kind="slurm", argv=argv, env={}, workdir="/")
    d.hostname = "node-0"
    d.hosts = ("node-0",)
    d.exports = {
        m.group(1): shlex.split(m.group(2))[0] if m.group(2) else ""
        for m in re.finditer(r"^export ([A-Z_][A-Z0-9_]*)=(\S*)$", script, re.M)
    }
    d.env = {
        "SLURM_JOB_ID": "1",
        "SLURM_JOBID": "1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "node-0",
        "SLURM_NODELIST": "node-0",
        "SLURM_JOB_NAME": "gpuc-validate",
        "SLURM_SUBMIT_DIR": chdir.group(1),
        "HOME": "/root",
        "USER": "root",
    }
    d.volumes.append(Volume(outs.mount.mount_point, stage / "lustre" / "fs", "lustre"))
    d.volumes.append(Volume("/opt/gpuc-rehearsal/job.sbatch", path, "script", True))
    d.said.append("user 0: the batch script names no user (Slurm runs it as the submitter)")
    return d
