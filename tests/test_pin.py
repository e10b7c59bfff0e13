"""``gpu-cluster pin STACK`` end to end against a registry served here that speaks the Docker
Registry HTTP API V2 (``HEAD /v2/<name>/manifests/<tag>`` answered with ``Docker-Content-Digest``):
each image the stack pulls by tag is asked of it through workloads/validate/registry.py, the digests
land in the stack file's ``images:`` with the file's comments kept, and the plan then pulls them by
digest. A registry that does not know one image leaves that one by tag and the rest written."""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components.k8s.addons import JOBSET_IMAGE
from gpu_cluster.components.k8s.kueue import KUEUE_IMAGE
from gpu_cluster.components.k8s.metrics import PUSHGATEWAY_IMAGE
from gpu_cluster.components.spec import load_stack
from gpu_cluster import pin as pin_cmd
from gpu_cluster.workloads.launch import validation as vjob
from gpu_cluster.workloads.validate import registry

ROOT = Path(__file__).resolve().parents[1]


def digest(ref: str, generation: int = 0) -> str:
    return "sha256:" + hashlib.sha256(f"{ref} #{generation}".encode()).hexdigest()


class Registry(BaseHTTPRequestHandler):
    served: dict[str, str]
    """``/v2/<name>/manifests/<tag>`` -> digest."""
    asked: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.asked.append(self.path)
        found = self.served.get(self.path)
        self.send_response(200 if found else 404)
        if found:
            self.send_header("Docker-Content-Digest", found)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Served:
    """What the registry here holds, and how to ask it for a published image's tag."""

    def __init__(self, host: str, served: dict[str, str], asked: list[str]) -> None:
        self.host, self.served, self.asked = host, served, asked

    def publish(self, ref: str, generation: int = 0) -> None:
        name, tag = ref.split("/", 1)[1].rsplit(":", 1)
        self.served[f"/v2/{name}/manifests/{tag}"] = digest(ref, generation)

    def resolve(self, ref: str) -> str:
        # The image's own registry is not reachable from here: its path and tag go to this one.
        return registry.resolve(f"{self.host}/{ref.split('/', 1)[1]}")


@pytest.fixture
def reg() -> Iterator[Served]:
    served: dict[str, str] = {}
    asked: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("R", (Registry,), {"served": served, "asked": asked}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Served(f"127.0.0.1:{server.server_address[1]}", served, asked)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    path = tmp_path / "Pulumi.mine.yaml"
    shutil.copy(ROOT / "stacks" / "Pulumi.gcp-h100-gke.yaml", path)
    return path


def run(path: Path, reg: Served, refresh: bool = False) -> tuple[int, list[str]]:
    said: list[str] = []
    rc = pin_cmd.pin(str(path), refresh=refresh, resolve=reg.resolve, say=said.append)
    return rc, said


def test_pin_writes_every_digest_and_keeps_the_file(stack: Path, reg: Served) -> None:
    uses = [u.ref for u in pin_cmd.image_uses(load_stack(str(stack), deployer_placeholder=True)[1])]
    # GKE deploys the Pushgateway too (components/gcp/orchestration_gke.py).
    assert uses == [JOBSET_IMAGE, PUSHGATEWAY_IMAGE, KUEUE_IMAGE, vjob.DEFAULT_IMAGE]
    for ref in uses:
        reg.publish(ref)
    before = stack.read_text()
    rc, said = run(stack, reg)
    assert rc == 0, said
    assert said[0].startswith(f"[1/4] {JOBSET_IMAGE}: {digest(JOBSET_IMAGE)}")
    assert said[-1] == f"wrote 4 pin(s) to {stack}"
    after = stack.read_text()
    # Comments and every other line kept; the pins read back as written.
    assert [line for line in before.splitlines() if line.strip()] == [
        line
        for line in after.splitlines()
        if line.strip() and "images:" not in line and "Pinned by" not in line and not line.startswith('      "')
    ]
    raw = yaml.safe_load(after)["config"]["gpu-cluster:cluster"]
    assert raw["images"] == {ref: digest(ref) for ref in uses}
    spec = load_stack(str(stack), deployer_placeholder=True)[1]
    assert dict(spec.images) == raw["images"]
    # Run again: nothing asked, nothing written.
    reg.asked.clear()
    rc, said = run(stack, reg)
    assert rc == 0 and reg.asked == [] and all("already pinned" in line for line in said)
    assert stack.read_text() == after


def test_an_image_the_registry_lacks_stays_by_tag_and_the_rest_is_written(stack: Path, reg: Served) -> None:
    reg.publish(JOBSET_IMAGE)
    reg.publish(PUSHGATEWAY_IMAGE)
    reg.publish(vjob.DEFAULT_IMAGE)
    rc, said = run(stack, reg)
    assert rc == 1
    [line] = [x for x in said if x.startswith(f"[3/4] {KUEUE_IMAGE}: NOT pinned:")]
    assert "no such tag (404)" in line and f"write its digest under images: (crane digest {KUEUE_IMAGE})" in line
    assert said[-1] == "1 image(s) left by tag; fix what each line says and run pin again"
    pins = yaml.safe_load(stack.read_text())["config"]["gpu-cluster:cluster"]["images"]
    assert set(pins) == {JOBSET_IMAGE, PUSHGATEWAY_IMAGE, vjob.DEFAULT_IMAGE}
    # Once published, a second run adds it and keeps the others.
    reg.publish(KUEUE_IMAGE)
    rc, said = run(stack, reg)
    assert rc == 0
    pins = yaml.safe_load(stack.read_text())["config"]["gpu-cluster:cluster"]["images"]
    assert pins == {r: digest(r) for r in (JOBSET_IMAGE, PUSHGATEWAY_IMAGE, KUEUE_IMAGE, vjob.DEFAULT_IMAGE)}
    assert stack.read_text().count("images:") == 1


def test_refresh_reports_a_moved_tag(stack: Path, reg: Served) -> None:
    for ref in (JOBSET_IMAGE, PUSHGATEWAY_IMAGE, KUEUE_IMAGE, vjob.DEFAULT_IMAGE):
        reg.publish(ref)
    assert run(stack, reg)[0] == 0
    reg.publish(vjob.DEFAULT_IMAGE, generation=1)
    rc, said = run(stack, reg, refresh=True)
    assert rc == 0
    assert (
        f"{vjob.DEFAULT_IMAGE}: {digest(vjob.DEFAULT_IMAGE, 1)} (was {digest(vjob.DEFAULT_IMAGE)}: the tag has moved)"
        in ("\n".join(said))
    )
    pins = yaml.safe_load(stack.read_text())["config"]["gpu-cluster:cluster"]["images"]
    assert pins[vjob.DEFAULT_IMAGE] == digest(vjob.DEFAULT_IMAGE, 1)


def test_an_eks_stack_pins_every_chart_image_and_the_plan_pulls_them(tmp_path: Path, reg: Served) -> None:
    from gpu_cluster.components.aws.versions import NVIDIA_PLUGIN_IMAGE, efa_plugin_image
    from gpu_cluster.components.plan_caveats import caveats

    path = tmp_path / "Pulumi.mine.yaml"
    shutil.copy(ROOT / "stacks" / "Pulumi.aws-h100-eks.yaml", path)
    spec = load_stack(str(path), deployer_placeholder=True)[1]
    uses = [u.ref for u in pin_cmd.image_uses(spec)]
    from gpu_cluster.components.aws import efa_exporter

    efa = efa_plugin_image("us-east-1")
    # The EFA exporter DaemonSet's node exporter image too (components/aws/efa_exporter.py).
    assert uses == [
        NVIDIA_PLUGIN_IMAGE,
        efa,
        efa_exporter.IMAGE,
        JOBSET_IMAGE,
        PUSHGATEWAY_IMAGE,
        vjob.default_image("efa"),
    ]
    [before] = [c.text for c in caveats(spec, {}) if c.topic == "images"]
    assert all(ref in before for ref in uses[:5]) and "EKS managed add-ons" in before
    for ref in uses:
        reg.publish(ref)
    rc, said = run(path, reg)
    assert rc == 0, said
    assert said[-1] == f"wrote 6 pin(s) to {path}"
    spec = load_stack(str(path), deployer_placeholder=True)[1]
    assert dict(spec.images) == {ref: digest(ref) for ref in uses}
    # The Pushgateway's chart takes its pin as its image values (components/k8s/metrics.py).
    from gpu_cluster.components.k8s.metrics import pushgateway_values

    image = pushgateway_values({}, spec.images)["image"]
    assert f"{image['repository']}:{image['tag']}" == f"{PUSHGATEWAY_IMAGE}@{digest(PUSHGATEWAY_IMAGE)}"
    # Pinned, the caveat names only what no pin can name: the managed add-ons' images.
    [after] = [c.text for c in caveats(spec, {}) if c.topic == "images"]
    assert after.startswith("the EKS managed add-ons (vpc-cni, eks-pod-identity-agent, aws-fsx-csi-driver)")
    assert not any(ref in after for ref in uses)


def test_a_slurm_stack_has_nothing_to_pin(reg: Served) -> None:
    said: list[str] = []
    assert pin_cmd.pin("gcp-h200-slurm", refresh=False, resolve=reg.resolve, say=said.append) == 0
    assert said == ["gcp-h200-slurm: nothing to pin (every image it pulls is by digest, or it runs no image)"]


def test_list_asks_no_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert pin_cmd.main(["gcp-h200-gke", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"BY TAG  {JOBSET_IMAGE}")
    assert any("nccl-plugin-gib:v1.1.1" in line and "privileged" in line for line in out)


def test_list_of_a_stack_that_pulls_nothing_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert pin_cmd.main(["aws-h200-slurm", "--list"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["aws-h200-slurm: pulls no container image (its jobs run on the node image): nothing to pin"]
