"""Plain data in and out of the liveness model: what the plan and the rendered job hand in, and
the checks that come out.

Nothing here knows Pulumi or the launcher: the plan passes its recorded resources as
:class:`Resource` rows (type, name, id, inputs) with the stack outputs, and whoever rendered the
job (``gpu-cluster plan``, ``validate render``) passes it as a :class:`Job`: its manifests or
batch script, the environment and library path it sets, what it sources and what it finds on its
node when it starts. So ``components`` never imports ``workloads``, and the model stays a pure
function of data (fast enough to run in every plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# The five kinds of check, in the order a pod meets them (issue 32).
KINDS = ("admission", "scheduling", "reachability", "node-image", "ordering")
Kind = Literal["admission", "scheduling", "reachability", "node-image", "ordering"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One thing a pod (or a node, or an object) needs, and whether the plan gives it."""

    kind: Kind
    object: str
    """What needs it: ``JobSet gpu-jobs/gpuc-<run> pod``, ``ClusterQueue gpu-cluster-queue``."""
    check: str
    """What it needs, in a few words."""
    holds: bool
    why: str
    """Why it holds (the fact that makes it so) or why not (what is missing)."""
    source: str
    """Where the fact is read: a repository file at a pinned commit and line, or a page."""
    fix: str = ""
    """When it does not hold: what to change."""
    unverified: bool = False
    """It holds only on the job's own check at start (its search for a path, or its start-up gate
    for the GPU driver), with no cited manifest or record of the node image or the container to say
    it will pass; or on what this plan cannot show, such as the routes of an existing VPC): counted
    apart, never as proven."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "object": self.object,
            "check": self.check,
            "holds": self.holds,
            "why": self.why,
            "source": self.source,
        }
        if self.fix:
            out["fix"] = self.fix
        if self.unverified:
            out["unverified"] = True
        return out


@dataclass(frozen=True, slots=True)
class Liveness:
    """Every check of one stack; it holds when every check holds."""

    checks: tuple[Check, ...]

    @property
    def holds(self) -> bool:
        return all(c.holds for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.holds)

    @property
    def unverified(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.holds and c.unverified)

    def as_dict(self) -> dict[str, Any]:
        return {"holds": self.holds, "checks": [c.as_dict() for c in self.checks]}

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per kind: (checks that hold, checks)."""
        out: dict[str, tuple[int, int]] = {}
        for k in KINDS:
            mine = [c for c in self.checks if c.kind == k]
            out[k] = (sum(1 for c in mine if c.holds), len(mine))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """One resource the plan would register: its type token, logical name, the id the engine gave
    it (what other resources' inputs refer to it by) and its inputs."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The offline plan: every resource, the stack outputs, and what ``pulumi up`` adds that this
    plan leaves out (with why), so a check can say so instead of failing on it."""

    resources: tuple[Resource, ...]
    outputs: Mapping[str, Any]
    deferred: Mapping[str, str] = field(default_factory=dict)
    """``installer``: the GKE NCCL plugin installer, which `pulumi up` plans once the stack names
    its image by digest (the spec requires it there; the offline plan has no image to plan)."""

    def of(self, *types: str) -> list[Resource]:
        return [r for r in self.resources if r.type in types]

    def ref(self, value: Any) -> Resource | None:
        """The resource an input names by its id (or, for names the program passes, its name)."""
        if not isinstance(value, str) or not value:
            return None
        for r in self.resources:
            if value in (r.id, r.name):
                return r
        return None

    @property
    def cloud(self) -> str:
        return str(self.outputs.get("cloud", ""))

    @property
    def orchestrator(self) -> str:
        return str(self.outputs.get("orchestrator", ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundAtStart:
    """A path the job finds on its node when it starts, instead of one fixed in the job: the first
    candidate that holds ``marker`` is used, and a node with none stops the job naming them."""

    what: str
    """What it is for: ``LD_LIBRARY_PATH: the aws-ofi-nccl plugin``."""
    candidates: tuple[str, ...]
    marker: str = ""
    """The file that decides a candidate (``libnccl-net-ofi.so``); empty: the path itself."""
    optional: bool = False
    """Used when found, left unset when not (a tuner NCCL runs without)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """The rendered validation job (or a user job) as plain data."""

    scheduler: Literal["kubernetes", "slurm"]
    name: str
    nodes: int
    gpus_per_node: int = 0
    manifests: tuple[Mapping[str, Any], ...] = ()
    """Kubernetes: the JobSet and its NetworkPolicy, as rendered."""
    partition: str | None = None
    """Slurm: the partition the batch script asks for."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Every variable the job sets before torchrun (NCCL's, the fabric's, the job's own)."""
    library_path: tuple[str, ...] = ()
    """Directories the job puts first on ``LD_LIBRARY_PATH``."""
    sourced: tuple[str, ...] = ()
    """Scripts the job sources before torchrun (the plugin's environment script)."""
    found_at_start: tuple[FoundAtStart, ...] = ()
    ports: tuple[int, ...] = ()
    """TCP ports the job's processes listen on across nodes (the rendezvous ports)."""
    image: str = ""
    """Kubernetes: the workload container's image."""
    interpreters: tuple[str, ...] = ()
    """Slurm: the interpreters the batch script tries at start, in order (names or paths); the first
    at least ``python_min`` runs the job, and with none the job stops."""
    python_min: tuple[int, int] = (0, 0)
    workdir: str = ""
    """Slurm: the run directory; the batch host unpacks the job's code there and every node's ranks
    read it and write their results there, so it must be on a file system every node mounts."""
    created_at_submit: tuple[str, ...] = ()
    """Objects whoever submits the job creates with it, as ``<Kind> <namespace>/<name>`` (the code
    ConfigMap ``validate submit`` makes beside the JobSet)."""

    def pods(self) -> list[tuple[str, Mapping[str, Any], int]]:
        """(object name, pod spec, replicas) of every pod template the manifests hold."""
        out: list[tuple[str, Mapping[str, Any], int]] = []
        for m in self.manifests:
            if m.get("kind") != "JobSet":
                continue
            meta = m.get("metadata") or {}
            for rj in (m.get("spec") or {}).get("replicatedJobs") or []:
                job = ((rj.get("template") or {}).get("spec")) or {}
                pod = ((job.get("template") or {}).get("spec")) or {}
                count = int(job.get("parallelism") or 1) * int(rj.get("replicas") or 1)
                out.append(
                    (f"JobSet {meta.get('namespace', 'default')}/{meta.get('name')} {rj.get('name')} pod", pod, count)
                )
        return out

    def jobsets(self) -> Iterable[Mapping[str, Any]]:
        return (m for m in self.manifests if m.get("kind") == "JobSet")


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels; matchExpressions In, NotIn, Exists, DoesNotExist) over
    ``labels``; ``{}`` selects everything. What a missing selector means differs by API (a
    NetworkPolicy's selects every pod, a ClusterQueue's namespaceSelector nothing): callers decide."""
    if any(labels.get(str(k)) != str(v) for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = str(e.get("key")), str(e.get("operator")), [str(v) for v in e.get("values") or []]
        has = key in labels
        if (
            (op == "In" and not (has and labels[key] in vals))
            or (op == "NotIn" and has and labels[key] in vals)
            or (op == "Exists" and not has)
            or (op == "DoesNotExist" and has)
        ):
            return False
    return True


def unverified_tail(count: int) -> str:
    """What the liveness line adds for checks that hold unverified: each check's ``why`` says on
    what (the job's own check at start, or what the plan does not hold, such as an existing VPC's
    routes)."""
    if not count:
        return ""
    return f"; {count} unverified (no cited manifest, record or planned resource proves it: see each check's why)"
