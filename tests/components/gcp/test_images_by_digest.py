"""Every image a GCP stack plans, and every image of the job `submit` hands GKE, is pulled by
digest (issue 25; Checkov CKV_K8S_43): every ``image`` field of every planned resource (the
installer and injector DaemonSets, and anything else that carries one) and of every rendered
manifest is ``repo[:tag]@sha256:<64 hex>``. A tag can be moved to other bytes under a running
fleet; a digest cannot."""

from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import yaml

from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands
from tests.components.gcp.conftest import DEPLOYER, PROJECT, gcp_obj, supplied_installer
from tests.launch.test_render_stacks import args as job_args
from tests.workloads.test_registry import REPO_NAME, TAG, _serve

BY_DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}\Z")
GKE_STACKS = ("gcp-h100-gke", "gcp-h200-gke", "gcp-b200-gke")
GCP_STACKS = (*GKE_STACKS, "gcp-h200-slurm")


def images(obj: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, value) of every ``image`` field with a text value, at any depth."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "image" and isinstance(v, str):
                yield f"{path}.{k}", v
            yield from images(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from images(v, f"{path}[{i}]")


def stack_obj(stack: str) -> dict[str, Any]:
    """The bundled stack as a user deploys it: with the deployer's range, and on a fabric whose
    installer no published reference pins, the installer digest the user supplies."""
    obj = copy.deepcopy(read_stack_file(stack)[1])
    if obj["orchestration"]["kind"] == "gke":
        obj["orchestration"]["deployer_cidrs"] = [DEPLOYER]
        supplied = supplied_installer(obj["compute"]["instance_type"])
        if supplied:
            obj["orchestration"]["installer_image"] = supplied
    return obj


def test_the_walk_finds_a_tag_only_image() -> None:
    found = dict(images({"spec": {"containers": [{"image": "a/b:1"}, {"image": f"a/b:1@sha256:{'0' * 64}"}]}}))
    assert list(found.values()) == ["a/b:1", f"a/b:1@sha256:{'0' * 64}"]
    assert [bool(BY_DIGEST.match(v)) for v in found.values()] == [False, True]


@pytest.mark.parametrize("stack", GCP_STACKS)
def test_every_image_a_gcp_stack_plans_is_by_digest(stack: str, offline: Callable[..., OfflineRun]) -> None:
    run = offline(stack_obj(stack))
    found = [(r.name + where, v) for r in run.resources for where, v in images(r.inputs)]
    assert [x for x in found if not BY_DIGEST.match(x[1])] == []
    if stack in GKE_STACKS:
        assert found  # the installers (and on TCPXO the injector) are there to be checked


@pytest.mark.parametrize("itype", ["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"])
def test_every_gke_machine_type_plans_its_images_by_digest(itype: str, offline: Callable[..., OfflineRun]) -> None:
    run = offline(gcp_obj(itype), PROJECT)
    found = [(r.name + where, v) for r in run.resources for where, v in images(r.inputs)]
    assert found and [x for x in found if not BY_DIGEST.match(x[1])] == []


@pytest.mark.parametrize("stack", GKE_STACKS)
def test_the_job_submit_hands_gke_runs_every_image_by_digest(
    stack: str, offline: Callable[..., OfflineRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`submit` resolves the job image's tag through its registry (a registry served here) and
    renders the job with the digest; every other image of the job (the TCPXO receive-datapath
    sidecar) comes by digest from the catalog. Every rendered manifest is walked."""
    from gpu_cluster.components.contract import read_outputs

    outs = read_outputs(offline(stack_obj(stack)).outputs)
    monkeypatch.setenv("DOCKER_CONFIG", "/nonexistent")
    for host, _ in _serve(None):
        tagged = argparse.Namespace(**{**vars(job_args()), "image": f"{host}/{REPO_NAME}:{TAG}"})
        pinned = commands.pin_image(outs, tagged, lambda _: None)
        r = commands.render_run(outs, pinned, "20261201t080000z-beef")
    found = [
        (f"{name}{where}", v)
        for name, text in r.files.items()
        for doc in yaml.safe_load_all(text)
        for where, v in images(doc)
    ]
    assert len(found) >= 1 + (stack == "gcp-h100-gke")  # the job, and on TCPXO its sidecar
    assert [x for x in found if not BY_DIGEST.match(x[1])] == []
    assert all(vjob.pinned(v) for _, v in found)
