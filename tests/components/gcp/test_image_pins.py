"""The stack's image pins (components/image_pins.py, issue 25): what a GKE stack pulls by a tag no
public source gives the digest of (the JobSet and Kueue controllers, the gIB installer, the
validation job's image) is pulled by the digest the stack pins, in the plan and in the rendered
job; the plan lists what is still by tag; a bad pin is refused with the value and what is allowed."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Callable

import pytest
import yaml

from gpu_cluster.components.contract import read_outputs
from gpu_cluster.components.engine import OfflineRun
from gpu_cluster.components.image_pins import check_pins, chart_image, pinned
from gpu_cluster.components.k8s.addons import JOBSET_IMAGE
from gpu_cluster.components.k8s.kueue import KUEUE_IMAGE
from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_IMAGE
from gpu_cluster.components.plan_caveats import caveats
from gpu_cluster.components.spec import SpecError, parse_spec, read_stack_file
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import commands
from tests.components.gcp.conftest import DEPLOYER
from tests.components.gcp.test_images_by_digest import BY_DIGEST, images
from tests.launch.test_render_stacks import args as job_args

GIB = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1"


def digest_of(ref: str) -> str:
    return "sha256:" + hashlib.sha256(f"pinned in a test: {ref}".encode()).hexdigest()


def pinned_stack(stack: str, refs: list[str]) -> dict[str, Any]:
    obj = copy.deepcopy(read_stack_file(stack)[1])
    obj["orchestration"]["deployer_cidrs"] = [DEPLOYER]
    obj["images"] = {ref: digest_of(ref) for ref in refs}
    return obj


def chart_values(run: OfflineRun, chart: str) -> dict[str, Any]:
    [res] = [r for r in run.of_type("kubernetes:helm.sh/v4:Chart") if r.inputs.get("chart", "").endswith(chart)]
    return dict(res.inputs.get("values") or {})


def env_values(obj: Any, name: str) -> list[str]:
    """Every value of the environment variable ``name`` anywhere in a manifest."""
    if isinstance(obj, dict):
        own = [obj["value"]] if obj.get("name") == name and "value" in obj else []
        return own + [v for x in obj.values() for v in env_values(x, name)]
    if isinstance(obj, list):
        return [v for x in obj for v in env_values(x, name)]
    return []


def test_pins_are_checked_each_with_its_value_and_what_is_allowed() -> None:
    good = digest_of("a")
    pins, problems = check_pins(
        {
            "registry.k8s.io/kueue/kueue:v0.17.1": good,
            "localhost:5000/team/img:1.0": good,
            "registry.k8s.io/kueue/kueue": good,
            f"registry.k8s.io/kueue/kueue:v0.17.1@{good}": good,
            "nvcr.io/nvidia/pytorch:25.01-py3": "sha256:abc",
        }
    )
    assert pins == {"registry.k8s.io/kueue/kueue:v0.17.1": good, "localhost:5000/team/img:1.0": good}
    assert [p for p, _ in problems] == [
        "images.registry.k8s.io/kueue/kueue",
        f"images.registry.k8s.io/kueue/kueue:v0.17.1@{good}",
        "images.nvcr.io/nvidia/pytorch:25.01-py3",
    ]
    assert "with a tag and no digest (allowed: registry/path:tag)" in problems[0][1]
    assert "'sha256:abc' is not a digest (allowed: sha256: and 64 lower-case hex digits" in problems[2][1]
    assert check_pins(["x"])[1][0][1].startswith("expected a mapping of repo:tag to sha256:<64 hex>")


def test_a_bad_pin_stops_the_spec_at_its_path() -> None:
    obj = pinned_stack("gcp-h100-gke", [])
    obj["images"] = {KUEUE_IMAGE: "latest"}
    with pytest.raises(SpecError) as err:
        parse_spec(obj)
    assert [p for p, _ in err.value.problems] == [f"images.{KUEUE_IMAGE}"]


def test_pinned_leaves_a_digest_and_an_unpinned_tag_alone() -> None:
    d = digest_of("x")
    assert pinned("a/b:1", {"a/b:1": d}) == f"a/b:1@{d}"
    assert pinned("a/b:2", {"a/b:1": d}) == "a/b:2"
    assert pinned(f"a/b:1@{digest_of('y')}", {"a/b:1": d}) == f"a/b:1@{digest_of('y')}"
    # A chart whose template writes repository:tag gets the digest inside its tag.
    assert chart_image("localhost:5000/k/kueue:v1", {"localhost:5000/k/kueue:v1": d}) == {
        "repository": "localhost:5000/k/kueue",
        "tag": f"v1@{d}",
    }
    assert chart_image("a/b:1", {}) is None


def test_the_kueue_and_jobset_controllers_run_the_pinned_digests(offline: Callable[..., OfflineRun]) -> None:
    run = offline(pinned_stack("gcp-h100-gke", [JOBSET_IMAGE, KUEUE_IMAGE]))
    kueue = chart_values(run, "charts/kueue")["controllerManager"]
    assert kueue["manager"]["image"] == {
        "repository": "registry.k8s.io/kueue/kueue",
        "tag": f"v0.17.8@{digest_of(KUEUE_IMAGE)}",
        "pullPolicy": "IfNotPresent",
    }
    assert kueue["nodeSelector"]  # still on the system pool
    jobset = chart_values(run, "charts/jobset")
    assert jobset["image"]["repository"] + ":" + jobset["image"]["tag"] == f"{JOBSET_IMAGE}@{digest_of(JOBSET_IMAGE)}"


def test_without_pins_the_charts_keep_their_own_images_and_the_plan_says_so(
    offline: Callable[..., OfflineRun],
) -> None:
    obj = pinned_stack("gcp-h100-gke", [])
    run = offline(obj)
    assert "manager" not in chart_values(run, "charts/kueue")["controllerManager"]
    assert "image" not in chart_values(run, "charts/jobset")
    said = {c.topic: c.text for c in caveats(parse_spec(obj), run.outputs)}
    assert all(ref in said["images"] for ref in (JOBSET_IMAGE, KUEUE_IMAGE, PUSHGATEWAY_IMAGE))
    assert "`gpu-cluster pin STACK`" in said["images"]
    # Pinned, the caveat goes.
    both = pinned_stack("gcp-h100-gke", [JOBSET_IMAGE, KUEUE_IMAGE, PUSHGATEWAY_IMAGE])
    assert "images" not in {c.topic for c in caveats(parse_spec(both), offline(both).outputs)}


def test_a_pin_of_the_gib_installer_tag_plans_the_installer_by_that_digest(
    offline: Callable[..., OfflineRun],
) -> None:
    obj = pinned_stack("gcp-h200-gke", [GIB])
    spec = parse_spec(obj)  # `pulumi up`'s reading: the pin names the installer, so it is not refused
    assert spec.orchestration.installer_image is None
    run = offline(obj)
    [ds] = [r for r in run.of_type("kubernetes:apps/v1:DaemonSet") if "installer" in r.name]
    found = [v for _, v in images(ds.inputs)]
    assert f"{GIB}@{digest_of(GIB)}" in found and all(BY_DIGEST.match(v) for v in found)  # and its pause
    assert "installer" not in {c.topic for c in caveats(spec, run.outputs)}
    # Unpinned, `pulumi up`'s reading refuses it and names the pin as one way out.
    obj.pop("images")
    with pytest.raises(SpecError) as err:
        parse_spec(obj)
    assert "`gpu-cluster pin STACK` writes images:" in dict(err.value.problems)["orchestration.installer_image"]


@pytest.mark.parametrize("stack", ["gcp-h100-gke", "gcp-h200-gke"])
def test_a_pinned_stack_renders_its_job_with_no_image_by_tag(stack: str, offline: Callable[..., OfflineRun]) -> None:
    """`render` (offline, no registry): the pinned job image reaches the pods through the stack
    outputs (scheduler.images), and every image of every rendered manifest is by digest."""
    job_image = vjob.DEFAULT_IMAGE
    obj = pinned_stack(stack, [JOBSET_IMAGE, KUEUE_IMAGE, GIB, job_image])
    outs = read_outputs(offline(obj).outputs)
    assert outs.scheduler.images == obj["images"]
    r = commands.render_run(outs, job_args(), "20261201t090000z-cafe")
    found = [(n, v) for n, t in r.files.items() for doc in yaml.safe_load_all(t) for _, v in images(doc)]
    assert f"{job_image}@{digest_of(job_image)}" in [v for _, v in found]
    assert [x for x in found if not BY_DIGEST.match(x[1])] == []
    # The certificate records the image as run (the pods' GPUC_IMAGE_DIGEST).
    assert set(env_values(r.jobset, "GPUC_IMAGE_DIGEST")) == {f"{job_image}@{digest_of(job_image)}"}


def test_unpinned_the_rendered_job_is_by_tag_and_submit_would_resolve_it(offline: Callable[..., OfflineRun]) -> None:
    outs = read_outputs(offline(pinned_stack("gcp-h100-gke", [])).outputs)
    assert outs.scheduler.images == {}
    r = commands.render_run(outs, job_args(), "20261201t090000z-cafe")
    tagged = [v for t in r.files.values() for doc in yaml.safe_load_all(t) for _, v in images(doc) if "@" not in v]
    # The workload and its node gate (wait-for-node) run the one image.
    assert tagged == [vjob.DEFAULT_IMAGE, vjob.DEFAULT_IMAGE]


def test_a_tcpx_sidecar_pin_reaches_the_pod() -> None:
    """a3-highgpu-8g: the receive-datapath daemon has no published digest; a pin of its tag puts
    the digest in the sidecar (and in what the certificate records)."""
    from gpu_cluster.components.catalog import load_catalog, rxdm_fact

    rx = rxdm_fact(load_catalog().get("a3-highgpu-8g").network.fabric)
    assert rx is not None and rx.digest is None
    ref = f"{rx.image}:{rx.tag}"
    wired = vjob.fabric_wiring.wiring("tcpx").pod
    assert vjob.pin_sidecar(wired, {}).sidecar.image.ref == ref  # type: ignore[union-attr]
    got = vjob.pin_sidecar(wired, {ref: digest_of(ref)}).sidecar
    assert got is not None and got.image.ref == f"{ref}@{digest_of(ref)}"
    assert re.match(r".+@sha256:[0-9a-f]{64}$", got.image.ref)
