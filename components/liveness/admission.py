"""Admission: every custom resource means what the program wrote (its fields are the pinned API's),
and a queued job's queue leads, object by object, to a node pool that can get its nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_cluster.components.liveness import apis, facts
from gpu_cluster.components.liveness.cluster import Pool, quantity
from gpu_cluster.components.liveness.facts import cite
from gpu_cluster.components.liveness.model import Check, Job, Plan, selects

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2"


def _name(obj: Mapping[str, Any], fallback: str) -> str:
    return str((obj.get("metadata") or {}).get("name") or fallback)


def api_checks(plan: Plan, job: Job | None) -> list[Check]:
    """Each custom resource of the plan and each of the job's manifests against its typed model."""
    out: list[Check] = []
    objects: list[tuple[str, str, str, Mapping[str, Any]]] = []
    for r in plan.resources:
        key = apis.api_for(r.type)
        if key is not None:
            objects.append((key[0], key[1], _name(r.inputs, r.name), r.inputs))
    for m in job.manifests if job else ():
        api_version, kind = str(m.get("apiVersion", "")), str(m.get("kind", ""))
        group = api_version.split("/")[0] if "/" in api_version else ""
        if "." in group and group not in apis.BUILT_IN_GROUPS:
            objects.append((api_version, kind, _name(m, kind), m))
    for api_version, kind, name, obj in objects:
        label = f"{kind} {name}"
        api = apis.APIS.get((api_version, kind))
        if api is None:
            out.append(
                Check(
                    kind="admission",
                    object=label,
                    check=f"{api_version} {kind} has a typed model at the pinned version",
                    holds=False,
                    why=f"no model of {api_version} {kind}: what the API server keeps of it is not known here",
                    source=cite("k8s-crd-pruning"),
                    fix="write its model from the upstream types file at the pinned tag into components/liveness/apis.py",
                )
            )
            continue
        problems = apis.check_fields(api.spec, obj.get("spec") or {})
        if problems:
            first = problems[0]
            out.append(
                Check(
                    kind="admission",
                    object=label,
                    check=f"fields of {api_version} {kind} at {api.ref}",
                    holds=False,
                    why="; ".join(f"{p.path}: {p.reason}" for p in problems),
                    source=api.cite(first.line, first.file),
                    fix=f"write the fields {api.repo} {api.path} declares at {api.ref} ({api.version_note})",
                )
            )
        else:
            out.append(
                Check(
                    kind="admission",
                    object=label,
                    check=f"fields of {api_version} {kind} at {api.ref}",
                    holds=True,
                    why=f"every field set is one {api.spec.struct} declares ({api.version_note})",
                    source=api.cite(api.spec.line),
                )
            )
    return out


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector; None selects nothing (Kueue: "Defaults to null which is a nothing
    selector"), {} everything."""
    return selector is not None and selects(selector, labels)


def queue_checks(plan: Plan, job: Job | None, pool_list: list[Pool], job_requests: Mapping[str, float]) -> list[Check]:
    """The chain from the job's queue label to a pool that takes queued provisioning, and the other
    way: a queued pool gets nodes only for a queued job."""
    out: list[Check] = []
    queued_pools = [p for p in pool_list if p.queued]
    jobsets = list(job.jobsets()) if job else []
    queues = {str(((js.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL, "")) for js in jobsets} - {""}
    if not queues:
        if queued_pools and job is not None:
            out.append(
                Check(
                    kind="admission",
                    object=f"JobSet {job.name}",
                    check="a queued-provisioning pool gets nodes only for a queued job",
                    holds=False,
                    why=f"pool {queued_pools[0].name} takes queued provisioning, and the job names no "
                    f"{QUEUE_LABEL}: no ProvisioningRequest is made for it, so the pool never scales up",
                    source=cite("gke-queued"),
                    fix="submit the job through the stack's Kueue LocalQueue (stack output scheduler.queue)",
                )
            )
        return out
    assert job is not None
    ns = next((str((js.get("metadata") or {}).get("namespace", "default")) for js in jobsets), "default")
    objs = {
        (r.type.rsplit(":", 1)[-1], _name(r.inputs, r.name)): r.inputs
        for r in plan.resources
        if r.type.startswith(KUEUE)
    }
    kueue_chart = [
        r for r in plan.of("kubernetes:helm.sh/v4:Chart") if str(r.inputs.get("chart", "")).endswith("/kueue")
    ]
    obj = f"JobSet {ns}/{job.name}"

    def fail(check: str, why: str, source: str, fix: str) -> None:
        out.append(Check(kind="admission", object=obj, check=check, holds=False, why=why, source=source, fix=fix))

    def ok(check: str, why: str, source: str) -> None:
        out.append(Check(kind="admission", object=obj, check=check, holds=True, why=why, source=source))

    if not kueue_chart:
        fail(
            "Kueue is installed",
            "the job names a queue and no Kueue chart is planned",
            cite("kueue-chart"),
            "install Kueue",
        )
        return out
    values = kueue_chart[0].inputs.get("values") or {}
    frameworks = ((values.get("managerConfig") or {}).get("controllerManagerConfigYaml")) or None
    if frameworks is None:
        ok(
            "Kueue manages JobSets",
            "the chart's default integrations include jobset.x-k8s.io/jobset and the stack does not override them",
            facts.KUEUE_FRAMEWORKS_SOURCE,
        )
    for queue in sorted(queues):
        lq = objs.get(("LocalQueue", queue))
        if lq is None or str((lq.get("metadata") or {}).get("namespace", "")) != ns:
            fail(
                f"LocalQueue {ns}/{queue} exists",
                f"the job's {QUEUE_LABEL}={queue} names no LocalQueue in namespace {ns}",
                cite("kueue-provisioning-example", "27-33"),
                f"create LocalQueue {queue} in {ns} or label the job with an existing one",
            )
            continue
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        cq = objs.get(("ClusterQueue", cq_name))
        if cq is None:
            fail(
                f"LocalQueue {queue} -> ClusterQueue {cq_name}",
                f"ClusterQueue {cq_name!r} is not planned",
                apis.LOCAL_QUEUE.cite(37),
                "create the ClusterQueue the LocalQueue names",
            )
            continue
        spec = cq.get("spec") or {}
        ns_labels = {"kubernetes.io/metadata.name": ns}
        if not _selector_matches(spec.get("namespaceSelector"), ns_labels):
            fail(
                f"ClusterQueue {cq_name} admits namespace {ns}",
                f"its namespaceSelector {spec.get('namespaceSelector')!r} does not select {ns} (null selects none)",
                apis.CLUSTER_QUEUE.cite(105),
                f"set namespaceSelector.matchLabels kubernetes.io/metadata.name: {ns}",
            )
        else:
            ok(
                f"ClusterQueue {cq_name} admits namespace {ns}",
                "its namespaceSelector selects it",
                apis.CLUSTER_QUEUE.cite(105),
            )
        # Quota: every resource the job asks for is covered, and the whole job fits the nominal quota.
        covered: dict[str, float] = {}
        flavors: set[str] = set()
        for group in spec.get("resourceGroups") or []:
            for fl in group.get("flavors") or []:
                flavors.add(str(fl.get("name", "")))
                for res in fl.get("resources") or []:
                    covered[str(res.get("name"))] = covered.get(str(res.get("name")), 0.0) + quantity(
                        res.get("nominalQuota", 0)
                    )
        short = [
            f"{k} {v:g} > {covered[k]:g}" if k in covered else f"{k} not covered"
            for k, v in sorted(job_requests.items())
            if k not in covered or v > covered[k] + 1e-9
        ]
        if short:
            fail(
                f"ClusterQueue {cq_name} quota holds the whole job",
                "; ".join(short)
                + " (Kueue admits a workload only when its ClusterQueue covers every resource it requests)",
                apis.CLUSTER_QUEUE.cite(197),
                "cover the job's resources in the ClusterQueue's resourceGroups, at the pool's size",
            )
        else:
            ok(
                f"ClusterQueue {cq_name} quota holds the whole job",
                ", ".join(f"{k} {v:g} of {covered[k]:g}" for k, v in sorted(job_requests.items())),
                apis.CLUSTER_QUEUE.cite(250),
            )
        missing_flavors = sorted(f for f in flavors if ("ResourceFlavor", f) not in objs)
        if missing_flavors:
            fail(
                f"ClusterQueue {cq_name} flavors exist",
                f"ResourceFlavor {', '.join(missing_flavors)} not planned (the ClusterQueue stays inactive)",
                apis.CLUSTER_QUEUE.cite(220),
                "create the ResourceFlavors the ClusterQueue names",
            )
        strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        checks = [str(c.get("name", "")) for c in strategy]
        if not checks:
            fail(
                f"ClusterQueue {cq_name} -> a provisioning admission check",
                "its spec.admissionChecksStrategy names no AdmissionCheck, so Kueue admits on quota alone and "
                "no ProvisioningRequest is ever made for a queued pool",
                apis.CLUSTER_QUEUE.cite(120),
                "name the AdmissionCheck in spec.admissionChecksStrategy.admissionChecks (v1beta2 has no "
                "spec.admissionChecks: kueue PR 7490)",
            )
            continue
        for check_name in checks:
            ac = objs.get(("AdmissionCheck", check_name))
            if ac is None:
                fail(
                    f"ClusterQueue {cq_name} -> AdmissionCheck {check_name}",
                    f"AdmissionCheck {check_name!r} is not planned",
                    apis.CLUSTER_QUEUE.cite(162),
                    "create the AdmissionCheck",
                )
                continue
            ac_spec = ac.get("spec") or {}
            if ac_spec.get("controllerName") != facts.PROVISIONING_CONTROLLER:
                ok(
                    f"AdmissionCheck {check_name}",
                    f"controller {ac_spec.get('controllerName')} (not the provisioning controller)",
                    apis.ADMISSION_CHECK.cite(55),
                )
                continue
            params = ac_spec.get("parameters") or {}
            prc = objs.get(("ProvisioningRequestConfig", str(params.get("name", ""))))
            if params.get("kind") != "ProvisioningRequestConfig" or prc is None:
                fail(
                    f"AdmissionCheck {check_name} -> ProvisioningRequestConfig",
                    f"its parameters {params!r} name no planned ProvisioningRequestConfig",
                    apis.ADMISSION_CHECK.cite(60),
                    "point parameters at the ProvisioningRequestConfig",
                )
                continue
            klass = str((prc.get("spec") or {}).get("provisioningClassName", ""))
            managed = [str(m) for m in (prc.get("spec") or {}).get("managedResources") or []]
            if klass == facts.QUEUED_PROVISIONING_CLASS and not queued_pools:
                fail(
                    f"ProvisioningRequestConfig {params.get('name')} -> a queued pool",
                    f"class {klass} provisions only pools with queued provisioning, and the plan has none",
                    cite("gke-queued"),
                    "enable queued provisioning on the GPU pool (queuedProvisioning.enabled)",
                )
                continue
            if managed and not set(managed) & set(job_requests):
                fail(
                    f"ProvisioningRequestConfig {params.get('name')} manages what the job asks for",
                    f"managedResources {managed} and the job requests none of them: the workload would be "
                    "considered ready without a ProvisioningRequest",
                    apis.PROVISIONING_REQUEST_CONFIG.cite(65),
                    "list the job's accelerator in managedResources",
                )
                continue
            ok(
                f"queue {queue} -> ClusterQueue {cq_name} -> AdmissionCheck {check_name} -> "
                f"ProvisioningRequestConfig {params.get('name')} -> pool {', '.join(p.name for p in queued_pools)}",
                f"Kueue makes a ProvisioningRequest of class {klass} for the job and admits it once Provisioned=true",
                f"{cite('kueue-provisioning', '17-35')}; {apis.PROVISIONING_REQUEST_CONFIG.cite(44)}",
            )
    return out
