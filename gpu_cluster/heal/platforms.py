"""Which scheduler, cloud and check a stack's outputs call for, and the check on Kubernetes.

The path is read from the outputs (cloud, orchestrator) and, where a cloud offers two ways, from
the node's own VM each time (real state first): on GCP, whether the machine series takes Google's
faulty-host report and the VM is bound to a reservation (gpu_cluster.components.validation_time's
GKE_REPORT_SERIES and GCE_REPORT_SERIES, with their sources).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpu_cluster.components.validation_time import GCE_REPORT_SERIES, GKE_REPORT_SERIES, replace_estimate
from gpu_cluster.heal.adapters import AdapterError, Checker, CheckResult, Cloud, Instance, NodeState, Outcome, Progress
from gpu_cluster.heal.adapters import Scheduler
from gpu_cluster.heal.evidence import judge_pair


@dataclass(frozen=True, slots=True)
class Built:
    cluster: str
    scheduler: Scheduler
    cloud: Cloud
    checker: Checker
    describe: str
    lock: Any = None
    """The cluster's own lock (I9, gpu_cluster/heal/lock.py): a Lease, or a held Slurm job."""
    publisher: Any = None
    """Where the incidents are published (gpu_cluster/heal/publish.py); None: beside the journal."""


class PlatformError(ValueError):
    """The stack's platform cannot be healed from here; one line with the next step."""


_PROJECT = re.compile(r"--project[= ](\S+)")


def gcp_project(outs: Any) -> str:
    for text in (outs.access.kubeconfig_command, outs.access.ssh_command):
        m = _PROJECT.search(text or "")
        if m:
            return m.group(1)
    raise PlatformError("the outputs name no GCP project (--project in access.kubeconfig_command or ssh_command)")


def build(args: argparse.Namespace) -> Built:
    from gpu_cluster.components.contract import OutputsError
    from gpu_cluster.workloads.validate.commands import CommandError, load
    from gpu_cluster.workloads.validate.slurm import SchedulerError, shell_for

    try:
        outs = load(args.stack, args.outputs, allow_plan=False).outputs
    except (OutputsError, CommandError) as exc:
        raise PlatformError(str(exc)) from None
    from gpu_cluster.components.stack_locate import stack_label

    from gpu_cluster.heal import publish
    from gpu_cluster.heal.lock import KubeLease, SlurmLock, me

    run_dir = args.out or Path("out/heal") / stack_label(args.stack)
    try:
        if outs.scheduler.kind == "slurm":
            from gpu_cluster.heal.slurm import SlurmChecker, SlurmScheduler

            shell = shell_for(args.ssh or outs.access.ssh_command, args.here)
            sched: Scheduler = SlurmScheduler(shell, partition=outs.scheduler.partition)
            checker: Checker = SlurmChecker(shell, outs, args, run_dir)
            cloud = slurm_cloud(outs, sched)
            lock: Any = SlurmLock(shell, me(run_dir), partition=outs.scheduler.partition)
        else:
            from gpu_cluster.heal.kubernetes import KubeScheduler

            assert outs.access.kubeconfig is not None
            kube = KubeScheduler(outs.access.kubeconfig)
            sched = kube
            checker = KubeChecker(outs, args, run_dir)
            cloud = kube_cloud(outs, kube)
            lock = KubeLease(outs.access.kubeconfig, me(run_dir))
    except (SchedulerError, AdapterError) as exc:
        raise PlatformError(str(exc)) from None
    return Built(
        cluster=outs.cluster_name,
        scheduler=sched,
        cloud=cloud,
        checker=checker,
        describe=f"{outs.nodes} x {outs.instance_type} on {outs.cloud} ({outs.orchestrator}); replaces by {cloud.call}",
        lock=lock,
        publisher=publish.for_outputs(outs),
    )


def slurm_cloud(outs: Any, sched: Any) -> Cloud:
    if outs.cloud == "aws":
        from gpu_cluster.heal.aws import PcsCloud, clients, pcs_client

        return PcsCloud(clients(outs.region)[0], pcs_client(outs.region))
    if outs.cloud == "gcp":
        from gpu_cluster.heal import gcp

        c = gcp.compute_clients()
        project = gcp_project(outs)
        return GcpChoice(
            gcp.GceReportCloud(c, project, outs.zone),
            gcp.SlurmPowerCycleCloud(c, project, outs.zone, sched),
            gcp.GceInstances(c, project, outs.zone),
            GCE_REPORT_SERIES,
        )
    if outs.cloud == "azure":
        from gpu_cluster.heal.azure import Arm
        from gpu_cluster.heal.azure_vmss import VmssCloud

        if not outs.access.scale_set_id:
            raise PlatformError(
                "the outputs name no GPU scale set (access.scale_set_id): the stack was built before heal "
                "could replace Azure Slurm nodes; run `pulumi up` with this version, or replace the node by hand "
                "(docs/azure.md, Slurm)"
            )
        return VmssCloud(Arm.from_environment(), outs.access.scale_set_id, sched)
    raise PlatformError(f"replacing a Slurm node on {outs.cloud} is not built")


def kube_cloud(outs: Any, kube: Any) -> Cloud:
    if outs.orchestrator == "eks":
        from gpu_cluster.heal.aws import EksAsgCloud, clients

        ec2, asg = clients(outs.region)
        # capacity block or not: read from each node's instance (EksAsgCloud.instance), not assumed
        return EksAsgCloud(ec2, asg)
    if outs.orchestrator == "gke":
        from gpu_cluster.heal import gcp

        c = gcp.compute_clients()
        project = gcp_project(outs)
        return GcpChoice(
            gcp.GkeReportCloud(c, project, outs.zone, kube),
            gcp.GkeMigCloud(c, project, outs.zone, outs.cluster_name),
            gcp.GceInstances(c, project, outs.zone),
            GKE_REPORT_SERIES,
        )
    from gpu_cluster.heal.azure import AksCloud, Arm, cluster_of

    rg, name = cluster_of(outs.access.kubeconfig_command or "")
    return LazyAks(AksCloud(Arm.from_environment(), "", rg, name))


class GcpChoice:
    """Google's faulty-host report where the VM's series takes it and the VM is reservation-bound,
    else the other way; decided from the VM each time it is asked."""

    keeps_name = True
    """Both bring the node back under its name (the report moves the VM, slurm-gcp recreates it
    under the node's name): heal holds the slot's reservation across it (engine._hold_slot, I6)."""

    def __init__(self, report: Any, other: Any, vms: Any, series: tuple[str, ...]) -> None:
        self.report, self.other, self.vms, self.series = report, other, vms, series
        self.name = f"{report.name} | {other.name}"
        self.call = f"{report.call}, where the machine takes reports; else {other.call}"

    def pick(self, node: NodeState) -> Any:
        from gpu_cluster.heal.gcp import vm_name

        vm = self.vms.get(vm_name(node))
        if vm is None:
            return self.other
        mtype = str(vm.machine_type).rsplit("/", 1)[-1]
        bound = bool(vm.reservation_affinity and vm.reservation_affinity.values)
        return self.report if bound and mtype.startswith(self.series) else self.other

    def instance(self, node: NodeState) -> Instance:
        return self.pick(node).instance(node)  # type: ignore[no-any-return]

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        return self.pick(node).replace(node, instance, token, why)  # type: ignore[no-any-return]

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        return self.pick(node).progress(node, old, token, facts)  # type: ignore[no-any-return]

    def replace_estimate(self) -> tuple[float, str]:
        return max(self.report.replace_estimate(), self.other.replace_estimate())  # type: ignore[no-any-return]

    def prepare(self, node: NodeState, old: Instance) -> dict[str, Any]:
        fn = getattr(self.pick(node), "prepare", None)
        return dict(fn(node, old)) if fn is not None else {}

    def settle(self, node: NodeState, facts: Mapping[str, Any]) -> str:
        fn = getattr(self.pick(node), "settle", None)
        return str(fn(node, facts)) if fn is not None else ""


class LazyAks:
    """The AKS cloud, its subscription read from the first node's providerID."""

    def __init__(self, aks: Any) -> None:
        self.aks = aks
        self.name, self.call = aks.name, aks.call

    def _sub(self, node: NodeState) -> Any:
        if not self.aks.subscription:
            from gpu_cluster.heal.azure import subscription_of

            self.aks.subscription = subscription_of(node.instance)
        return self.aks

    def instance(self, node: NodeState) -> Instance:
        return self._sub(node).instance(node)  # type: ignore[no-any-return]

    def replace(self, node: NodeState, instance: Instance, token: str, why: str) -> Outcome:
        return self._sub(node).replace(node, instance, token, why)  # type: ignore[no-any-return]

    def progress(self, node: NodeState, old: str, token: str, facts: Mapping[str, Any]) -> Progress:
        return self._sub(node).progress(node, old, token, facts)  # type: ignore[no-any-return]

    def replace_estimate(self) -> tuple[float, str]:
        est = replace_estimate(self.aks.name)
        return est.seconds, est.basis


# ---- the check on Kubernetes ---------------------------------------------------------------


class KubeChecker:
    """The validation's main phase on the two nodes as a JobSet: the stack's own validation JobSet
    for two nodes, its pods held to the node and its peer (required node affinity on
    ``kubernetes.io/hostname``) and tolerating the quarantine (the cordon's
    ``node.kubernetes.io/unschedulable`` and our taint), the pairwise search off and the sweeps at the
    floor's size; judged by the job's own judge step, whose report leaves pod 0 in its log as
    ``validate submit`` reads it. Out of the stack's Kueue queue (GKE flex-start): pinned to nodes
    that exist, with the pool's tolerations; a node gone or being removed (a queued pool scales its
    nodes down once the job that asked for them ends) means the check cannot run, said in one line
    (workloads/validate/kube_queue.py has the sources)."""

    def __init__(self, outputs: Any, args: argparse.Namespace, local_dir: Path, poll_s: float = 10.0) -> None:
        self.outputs = outputs
        self.args = args
        self.local_dir = local_dir
        self.poll_s = poll_s

    def estimate(self) -> tuple[float, str]:
        from gpu_cluster.components.catalog import load_catalog
        from gpu_cluster.components.validation_time import revalidate_estimate

        est = revalidate_estimate(load_catalog().get(self.outputs.instance_type))
        return est.seconds, est.basis

    def render(self, node: str, peer: str, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(JobSet, NetworkPolicy) for the check."""
        from gpu_cluster.heal.kubernetes import tolerations
        from gpu_cluster.workloads.launch import bundle as code_bundle
        from gpu_cluster.workloads.launch import validation as vjob
        from gpu_cluster.workloads.launch.jobset import network_policy, unqueued
        from gpu_cluster.workloads.launch.jobset import render as render_jobset

        job = vjob.for_cluster(
            self.outputs,
            run_id,
            code_bundle.build(),
            python=getattr(self.args, "python", None),
            run_args=("--pairwise", "never", "--sweep-min", "8G"),
            drain=False,
            time_limit_min=max(10, int(self.estimate()[0] // 60) + 10),
        )
        job = replace(job, nodes=2, skip_steps=("pairs", "storage", "fabric-only", "ddp"))
        # Out of the stack's Kueue queue (GKE flex-start): pinned to two nodes that exist, the check
        # would otherwise wait on a ProvisioningRequest for new nodes that never carry their names.
        spec = unqueued(vjob.cluster_jobset(self.outputs, job, run_id, image=getattr(self.args, "image", None)))
        manifest = render_jobset(spec)
        for rj in manifest["spec"]["replicatedJobs"]:
            pod = rj["template"]["spec"]["template"]["spec"]
            pod["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node, peer]}
                                ]
                            }
                        ]
                    }
                }
            }
            pod["tolerations"] = [*(pod.get("tolerations") or []), *tolerations()]
        return manifest, network_policy(spec)

    def check(self, node: str, peer: str, incident: str, purpose: str) -> CheckResult:
        from gpu_cluster.workloads.launch import bundle as code_bundle
        from gpu_cluster.workloads.validate import kube, kube_queue

        run_id = f"heal-{incident}-{purpose}-{int(time.time())}"
        manifest, policy = self.render(node, peer, run_id)
        ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        dest = self.local_dir / "checks" / run_id
        try:
            assert self.outputs.access.kubeconfig is not None
            api = kube.KubeApi(self.outputs.access.kubeconfig)
            # A node gone (a queued pool scales its nodes down once the job that asked for them
            # ends) or being removed: the check cannot run, and no JobSet waits for it.
            gone = kube_queue.unavailable(api.list_nodes(""), [node, peer])
            if gone:
                line = kube_queue.gone_line(gone, self.outputs.scheduler.queue)
                return CheckResult(ran=False, passed=False, detail=f"the {purpose} check cannot run: {line}")
            kube.create(api, manifest, code_bundle.build(), policy)
            final = kube.follow(
                api, ns, name, expected_nodes=2, poll_s=10.0, timeout_s=self.estimate()[0] + 1800, say=print
            )
            kube.fetch(api, ns, name, dest)
        except (kube.ClusterUnreachable, RuntimeError, TimeoutError) as exc:
            return CheckResult(ran=False, passed=False, detail=str(exc)[:400])
        report = dest / "report.json"
        if not report.is_file():
            return CheckResult(
                ran=False, passed=False, detail=f"jobset {name} {final.outcome.lower()} with no report; see {dest}"
            )
        return judge_pair(json.loads(report.read_text(encoding="utf-8")), node, peer, str(report), final.outcome)
