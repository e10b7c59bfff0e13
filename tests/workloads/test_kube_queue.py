"""``validate submit`` on a queued pool (GKE flex-start with Kueue): the job's clock starts when
Kueue admits the JobSet, the wait for capacity is reported from the Workload, and a Workload Kueue
deactivates (its retries spent) ends the wait in one line. Against the test API server on 127.0.0.1
(tests/kubeapi.py) through the official client; the test plays Kueue and the JobSet controller,
in the shapes of kueue v0.17.8's Workload (apis/kueue/v1beta2/workload_types.go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpu_cluster.components.k8s import kueue as kueue_component
from tests.kubeapi import KubeApiServer
from gpu_cluster.workloads.validate import kube, kube_queue

NS, NAME = "gpu-jobs", "gpuc-val-q"


class Kueue:
    """The world between polls: ``steps`` are what Kueue and the controllers do, one per poll."""

    def __init__(self, server: KubeApiServer) -> None:
        self.store = server.store
        self.jobsets = self.store.resource("jobsets")
        self.workloads = server.register(
            kube_queue.WORKLOAD_GROUP, kube_queue.WORKLOAD_VERSION, kube_queue.WORKLOAD_PLURAL, "Workload"
        )
        js = self.store.create(
            self.jobsets,
            NS,
            {
                "apiVersion": kube.API_VERSION,
                "kind": "JobSet",
                "metadata": {"name": NAME, "labels": {"kueue.x-k8s.io/queue-name": "gpu-jobs"}},
                # Kueue's webhook suspends a queued JobSet on creation.
                "spec": {"suspend": True},
            },
        )
        self.uid = js["metadata"]["uid"]
        self.now = 0.0

    def workload(self, **status: Any) -> None:
        name = f"jobset-{NAME}-3f2a1"
        owner = {"apiVersion": kube.API_VERSION, "kind": "JobSet", "name": NAME, "uid": self.uid}
        body: dict[str, Any] = {
            "apiVersion": f"{kube_queue.WORKLOAD_GROUP}/{kube_queue.WORKLOAD_VERSION}",
            "kind": "Workload",
            "metadata": {"name": name, "ownerReferences": [owner]},
            "spec": {"active": status.pop("active", True)},
            "status": status,
        }
        self.store.put(self.workloads, NS, body)

    def admit_and_finish(self, how: str = "Completed") -> None:
        js = self.store.get(self.jobsets, NS, NAME)
        js["spec"]["suspend"] = False
        js["status"] = {"conditions": [{"type": how, "status": "True"}]}
        self.store.put(self.jobsets, NS, js)


def _follow(server: KubeApiServer, steps: list[Callable[[], None]], timeout_s: float) -> tuple[Any, list[str]]:
    """follow() with a clock that moves an hour a poll: any wait it bounds by the clock ends at once."""
    said: list[str] = []
    clock = [0.0]

    def sleep(_s: float) -> None:
        clock[0] += 3600.0
        if steps:
            steps.pop(0)()

    api = kube.KubeApi(server.kubeconfig(NS))
    final = kube.follow(
        api,
        NS,
        NAME,
        expected_nodes=4,
        poll_s=1.0,
        timeout_s=timeout_s,
        say=said.append,
        clock=lambda: clock[0],
        sleep=sleep,
    )
    return final, said


def test_a_queued_jobset_waits_for_capacity_without_its_clock_running() -> None:
    with KubeApiServer() as server:
        q = Kueue(server)
        pending = {"name": "gpu-provisioning", "state": "Pending", "message": "Waiting for resources"}
        steps = [
            lambda: q.workload(
                conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
                admissionChecks=[pending],
            ),
            lambda: q.workload(
                conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
                admissionChecks=[{**pending, "state": "Retry", "message": "Provisioning failed"}],
                requeueState={"count": 1},
            ),
            lambda: q.workload(
                conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
                admissionChecks=[{**pending, "state": "Ready", "message": ""}],
                requeueState={"count": 1},
            ),
            q.admit_and_finish,
        ]
        # Three hours in the queue against a 30-minute job clock: the clock starts at admission.
        final, said = _follow(server, steps, timeout_s=1800)
    assert final.done and final.outcome == "Completed"
    text = "\n".join(said)
    assert "queued · suspended; no Kueue Workload for it yet" in said[0]
    assert (
        "waiting for capacity: Workload jobset-gpuc-val-q-3f2a1; quota reserved; admission check gpu-provisioning Pending (Waiting for resources)"
        in text
    )
    assert "admission check gpu-provisioning Retry (Provisioning failed); requeued 1 time(s)" in text
    assert said[-1].endswith("completed · pods none yet of 4")


def test_a_workload_kueue_deactivates_ends_the_wait_in_one_line() -> None:
    with KubeApiServer() as server:
        q = Kueue(server)
        steps = [
            lambda: q.workload(
                active=False,
                conditions=[
                    {
                        "type": "Evicted",
                        "status": "True",
                        "reason": kube_queue.DEACTIVATED,
                        "message": "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
                    }
                ],
                requeueState={"count": 3},
            )
        ]
        with pytest.raises(kube.QueueGaveUp) as err:
            _follow(server, steps, timeout_s=1800)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"jobset {NAME} will not run: Kueue deactivated Workload jobset-gpuc-val-q-3f2a1 after 3 requeue(s)" in msg
    assert "maximum number of re-queuing retries" in msg and f"kubectl delete jobset {NAME} -n {NS}" in msg


def test_the_clock_still_bounds_an_admitted_job() -> None:
    with KubeApiServer() as server:
        q = Kueue(server)
        js = server.store.get(q.jobsets, NS, NAME)
        js["spec"]["suspend"] = False
        server.store.put(q.jobsets, NS, js)
        with pytest.raises(TimeoutError, match="not finished 1800 s after it was admitted"):
            _follow(server, [], timeout_s=1800)


def test_a_cluster_without_kueues_api_is_reported_and_waited_on() -> None:
    """No Workload API served (Kueue absent or not readable): the line says so; the wait goes on."""
    with KubeApiServer() as server:
        store = server.store
        jobsets = store.resource("jobsets")
        store.create(
            jobsets,
            NS,
            {"apiVersion": kube.API_VERSION, "kind": "JobSet", "metadata": {"name": NAME}, "spec": {"suspend": True}},
        )

        def finish() -> None:
            js = store.get(jobsets, NS, NAME)
            js["spec"]["suspend"] = False
            js["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
            store.put(jobsets, NS, js)

        final, said = _follow(server, [finish], timeout_s=60)
    assert final.outcome == "Failed"
    assert "its Kueue Workload could not be read" in said[0]


def test_the_retries_kueue_is_given_are_its_documented_defaults() -> None:
    """components/k8s/kueue.py writes them out; kube_queue's docstring cites the same lines."""
    assert kueue_component.RETRY_STRATEGY == {
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 1800,
    }
    (config,) = [
        spec
        for kind, _name, _ns, spec in kueue_component.queue_objects(
            kueue_component.Quota(gpus=8, cpus=8, memory_gib=8), NS
        )
        if kind == "ProvisioningRequestConfig"
    ]
    assert config["retryStrategy"] == kueue_component.RETRY_STRATEGY
