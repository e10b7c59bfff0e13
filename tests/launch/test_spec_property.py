"""Property: launch specs with odd field values fail as LaunchSpecError, and nothing that passes
validation carries a control character into the rendered script or manifest."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_cluster.workloads.launch import jobset, sbatch
from gpu_cluster.workloads.launch.common import LaunchSpecError

odd_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "ok\n",
            "ok\nrm -rf /",
            "a\x00b",
            "-x",
            "$(id)",
            "`id`",
            "a b",
            "%j",
            "/fsx\n",
            "gpu_cluster.workloads.validate\n",
            "gpu\n",
            "/fsx/r\n",
            "INIT\n",
            "n[1-2]\n",
            "\t",
            "é",
            "x" * 70,
        ]
    ),
    st.builds(
        lambda s, c: s + c,
        st.sampled_from(["ok", "/fsx/r", "gpu", "workloads.x", "a.b"]),
        st.sampled_from(["\n", "\r", "\x00", "\x1b", "\x7f", "\n#SBATCH --x"]),
    ),
)
odd_value = st.one_of(
    odd_text,
    st.integers(-(2**40), 2**40),
    st.sampled_from([-1, 0, 65536, 2**63]),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(odd_text, max_size=2).map(tuple),
    st.dictionaries(odd_text, odd_text, max_size=2),
)

SBATCH_BASE = sbatch.LaunchSpec(
    job_name="validate",
    nodes=2,
    module="gpu_cluster.workloads.validate",
    module_args=("--out", "/fsx/r"),
    workdir="/fsx/r",
    gpus_per_node=8,
    partition="gpu",
    fabric_env={"FI_PROVIDER": "efa"},
    then=(sbatch.Step(name="judge", module="gpu_cluster.workloads.validate", module_args=("judge",), torchrun=False),),
)
JOBSET_BASE = jobset.JobSetSpec(
    name="validate",
    nodes=2,
    image="registry.example/v:1",
    module="gpu_cluster.workloads.validate",
    module_args=("--out", "/fsx/r"),
    workdir="/fsx/r",
    gpus_per_node=8,
    efa_per_node=4,
    memory="100Gi",
    hugepages_2mi="512Mi",
    lustre_pvc="fsx",
    fabric_env={"FI_PROVIDER": "efa"},
    node_selector={"k": "v"},
    tolerate_taints=("nvidia.com/gpu",),
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _edits(base: Any) -> st.SearchStrategy[dict[str, Any]]:
    names = [f.name for f in dataclasses.fields(base)]
    return st.dictionaries(st.sampled_from(names), odd_value, min_size=1, max_size=3)


def _check(module: Any, base: Any, edits: dict[str, Any]) -> Any:
    spec = dataclasses.replace(base, **edits)
    try:
        module.validate(spec)
    except LaunchSpecError as err:
        assert err.problems and str(err)
        return None
    # Accepted: no edited string may carry a control character into the output.
    # A prologue is several lines of the launcher's own bash: newlines are its separators.
    for key, value in edits.items():
        allowed = "\n" if key == "prologue" else ""
        for s in _strings(value):
            assert not any((ord(c) < 0x20 and c not in allowed) or ord(c) == 0x7F for c in s), (
                f"validate accepted {s!r} in {edits}"
            )
    return module.render(spec)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_edits(SBATCH_BASE))
def test_sbatch_fails_only_with_launch_spec_error(edits: dict[str, Any]) -> None:
    script = _check(sbatch, SBATCH_BASE, edits)
    if script is not None:
        assert script.startswith("#!") and "#SBATCH --nodes=" in script


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_edits(JOBSET_BASE))
def test_jobset_fails_only_with_launch_spec_error(edits: dict[str, Any]) -> None:
    manifest = _check(jobset, JOBSET_BASE, edits)
    if manifest is not None:
        assert yaml.safe_load(yaml.safe_dump(manifest))["kind"] == "JobSet"
