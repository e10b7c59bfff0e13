"""The package schema as Pulumi's analyzer infers it from GpuCluster (pulumi.provider.experimental,
the code component_provider_host runs; no CLI): every input and output with its type, and
descriptions from the docstrings; examples/yaml checked against it."""

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components import args as args_module
from gpu_cluster.components import cluster as cluster_module
from gpu_cluster.components.args import to_spec
from gpu_cluster.components.provider import schema

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "gpu-cluster:index:GpuCluster"

# name -> (type or referenced type, required)
INPUTS = {
    "name": ("string", False),
    "cloud": ("string", True),
    "region": ("string", True),
    "zone": ("string", True),
    "zoneId": ("string", False),
    "compute": ("ComputeArgs", True),
    "interconnect": ("InterconnectArgs", False),
    "storage": ("StorageArgs", True),
    "orchestration": ("OrchestrationArgs", True),
    "network": ("NetworkArgs", False),
    "tags": ("object", False),
    "security": ("SecurityArgs", False),
    "images": ("object", False),
}
OUTPUTS = {
    "clusterName": ("string", True),
    "cloud": ("string", True),
    "region": ("string", True),
    "zone": ("string", True),
    "orchestrator": ("string", True),
    "instanceType": ("string", True),
    "nodes": ("integer", True),
    "gpusPerNode": ("integer", True),
    "kubeconfig": ("string", False),
    "apiEndpoint": ("string", False),
    "certificateAuthority": ("string", False),
    "login": ("string", False),
    "sshCommand": ("string", False),
    "networkId": ("string", True),
    "nodeSubnetId": ("string", True),
    "securityGroupId": ("string", True),
    "fileSystemId": ("string", True),
    "mount": ("Mount", True),
    "bucket": ("string", True),
    "nodeGroups": ("array", True),
    "fabric": ("Fabric", True),
    "stackOutputs": ("object", True),
}
# The ids of an existing network may come from other resources: Inputs, not plain (the control
# plane's subnets as one Output of a list too, as another program's VPC hands them out).
NOT_PLAIN = {("NetworkArgs", "vpcId"), ("NetworkArgs", "nodeSubnetId"), ("NetworkArgs", "controlPlaneSubnetIds")}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return schema()


def _kind(prop: dict[str, Any]) -> str:
    return prop["$ref"].rsplit(":", 1)[-1] if "$ref" in prop else prop["type"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _docstrings(path: Path) -> dict[str, dict[str, str]]:
    """class -> field -> the string literal after its annotation, read from the source."""
    out: dict[str, dict[str, str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            fields: dict[str, str] = {}
            for stmt, nxt in zip(node.body, node.body[1:]):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                ):
                    fields[stmt.target.id] = str(nxt.value.value)
            out[node.name] = fields
    return out


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def test_component_inputs_and_outputs(doc: dict[str, Any]) -> None:
    assert doc["name"] == "gpu-cluster" and doc["version"]
    res = doc["resources"][TOKEN]
    assert res["isComponent"] is True
    assert {k: _kind(v) for k, v in res["inputProperties"].items()} == {k: t for k, (t, _) in INPUTS.items()}
    assert sorted(res["requiredInputs"]) == sorted(k for k, (_, req) in INPUTS.items() if req)
    assert {k: _kind(v) for k, v in res["properties"].items()} == {k: t for k, (t, _) in OUTPUTS.items()}
    assert sorted(res["required"]) == sorted(k for k, (_, req) in OUTPUTS.items() if req)
    assert res["properties"]["nodeGroups"]["items"]["type"] == "string"
    assert res["inputProperties"]["tags"]["additionalProperties"]["type"] == "string"
    assert res["inputProperties"]["images"]["additionalProperties"]["type"] == "string"
    # Everything that decides the shape is plain; outputs never are.
    assert all(p.get("plain") for p in res["inputProperties"].values())
    assert not any(p.get("plain") for p in res["properties"].values())
    for name, typ in doc["types"].items():
        for key, prop in typ["properties"].items():
            if typ["properties"] and name.endswith("Args"):
                assert bool(prop.get("plain")) == ((name.rsplit(":", 1)[-1], key) not in NOT_PLAIN), (name, key)
    assert (
        doc["types"]["gpu-cluster:index:NetworkArgs"]["properties"]["controlPlaneSubnetIds"]["items"].get("plain")
        is None
    )


def test_descriptions_come_from_the_docstrings(doc: dict[str, Any]) -> None:
    res = doc["resources"][TOKEN]
    sources = {**_docstrings(Path(args_module.__file__)), **_docstrings(Path(cluster_module.__file__))}
    checked = 0
    for cls, props in [
        ("GpuClusterArgs", res["inputProperties"]),
        ("GpuCluster", res["properties"]),
        *[(n.rsplit(":", 1)[-1], t["properties"]) for n, t in doc["types"].items()],
    ]:
        fields = sources[cls]
        assert {_camel(f) for f in fields} == set(props), cls
        for field, text in fields.items():
            assert _same(props[_camel(field)]["description"], text), (cls, field)
            checked += 1
    assert checked >= 60
    assert res["description"].startswith("A multi-node GPU training cluster")


def _check(value: Any, prop: dict[str, Any], doc: dict[str, Any], path: str) -> list[str]:
    """Problems of a YAML value against a schema property (interpolations are strings)."""
    if "$ref" in prop:
        typ = doc["types"][prop["$ref"].removeprefix("#/types/")]
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        problems = [f"{path}.{k}: not in the schema" for k in value if k not in typ["properties"]]
        problems += [f"{path}.{k}: required" for k in typ.get("required", []) if k not in value]
        for k, v in value.items():
            if k in typ["properties"]:
                problems += _check(v, typ["properties"][k], doc, f"{path}.{k}")
        return problems
    kind = prop["type"]
    if isinstance(value, str) and value.startswith("${"):
        return []
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }[kind]
    if not ok:
        return [f"{path}: {value!r} is not a {kind}"]
    if kind == "array":
        return [p for i, v in enumerate(value) for p in _check(v, prop["items"], doc, f"{path}[{i}]")]
    if kind == "object" and "additionalProperties" in prop:
        return [p for k, v in value.items() for p in _check(v, prop["additionalProperties"], doc, f"{path}.{k}")]
    return []


def _snake(value: Any) -> Any:
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value


def test_yaml_example_matches_the_schema(doc: dict[str, Any]) -> None:
    program = yaml.safe_load((ROOT / "examples/yaml/Pulumi.yaml").read_text(encoding="utf-8"))
    res = doc["resources"][TOKEN]
    (cluster,) = program["resources"].values()
    assert cluster["type"] in ("gpu-cluster:GpuCluster", TOKEN)
    props = cluster["properties"]
    problems = [f"{k}: not an input of GpuCluster" for k in props if k not in res["inputProperties"]]
    problems += [f"{k}: required" for k in res["requiredInputs"] if k not in props]
    for k, v in props.items():
        if k in res["inputProperties"]:
            problems += _check(v, res["inputProperties"][k], doc, k)
    assert not problems, problems
    for expr in program["outputs"].values():
        attr = re.fullmatch(r"\$\{cluster\.(\w+)(?:\.(\w+))?\}", expr)
        assert attr and attr.group(1) in res["properties"], expr
        if attr.group(2):
            ref = res["properties"][attr.group(1)]["$ref"].removeprefix("#/types/")
            assert attr.group(2) in doc["types"][ref]["properties"], expr
    # And the values themselves pass the spec's rules, as the component will check them.
    args = _snake(props)
    args["orchestration"]["deployer_cidrs"] = ["52.0.0.1/32"]
    spec = to_spec("cluster", args)
    assert (spec.cloud, spec.compute.instance_type, spec.orchestration.kind) == ("gcp", "a3-megagpu-8g", "gke")


def test_yaml_checker_finds_a_wrong_name(doc: dict[str, Any]) -> None:
    res = doc["resources"][TOKEN]
    assert _check({"instanceType": "x", "node": 2}, res["inputProperties"]["compute"], doc, "compute") == [
        "compute.node: not in the schema",
        "compute.nodes: required",
    ]
    assert _check({"lustre": {"sizeGib": "36000"}}, res["inputProperties"]["storage"], doc, "storage") == [
        "storage.lustre.throughputMbpsPerTib: required",
        "storage.lustre.sizeGib: '36000' is not a integer",
    ]


def test_plugin_manifest_starts_the_component_provider_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """PulumiPlugin.yaml's main, run as the Python plugin host runs it (a script), hands
    component_provider_host the component, the package name and the version."""
    import runpy

    import pulumi.provider.experimental as experimental

    manifest = yaml.safe_load((ROOT / "provider" / "PulumiPlugin.yaml").read_text(encoding="utf-8"))
    assert manifest["runtime"]["name"] == "python" and manifest["runtime"]["options"]["toolchain"] == "pip"
    main = ROOT / "provider" / manifest["main"]
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        experimental,
        "component_provider_host",
        lambda components, name, namespace=None, version=None: calls.append((components, name, version)),
    )
    runpy.run_path(str(main), run_name="__main__")
    ((components, name, version),) = calls
    assert [c.__name__ for c in components] == ["GpuCluster"] and name == "gpu-cluster"
    assert version == schema()["version"]


def test_schema_command_prints_what_the_host_infers(tmp_path: Path) -> None:
    """``gpu-cluster schema`` and ``python -m gpu_cluster.components.provider schema``: the same JSON, no CLI."""
    import json
    import subprocess
    import sys

    from gpu_cluster import cli

    out = tmp_path / "schema.json"
    assert cli.main(["schema", "--out", str(out)]) == 0
    expected = schema()
    assert json.loads(out.read_text(encoding="utf-8")) == expected
    assert TOKEN in expected["resources"]
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.components.provider", "schema"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected


def test_plugin_requirements_are_the_core_at_the_pins() -> None:
    """provider/requirements.txt (what the plugin's virtualenv gets) is pyproject's core
    dependencies and the extras that hold a cloud's SDK (the plugin serves every cloud and has no
    extras to choose), each at requirements.txt's pin: no torch, no test tools."""
    import tomllib

    from gpu_cluster.components.cloud_sdk import EXTRA_SDKS

    def names(lines: list[str]) -> dict[str, str]:
        pins = {}
        for line in lines:
            line = line.split("#")[0].strip()
            if line:
                name, version = line.split("==")
                pins[name.lower()] = version
        return pins

    plugin = names((ROOT / "provider" / "requirements.txt").read_text(encoding="utf-8").splitlines())
    pinned = names((ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    cloud_extras = [r for sdk in EXTRA_SDKS.values() for r in project["optional-dependencies"][sdk.extra]]
    core_names = {re.split(r"[<>=!~ ]", c, maxsplit=1)[0].lower() for c in project["dependencies"]}
    extra_names = {re.split(r"[<>=!~ ]", c, maxsplit=1)[0].lower() for c in cloud_extras}
    assert "pulumi-azure-native" in extra_names - core_names
    assert set(plugin) == core_names | extra_names
    assert all(pinned[n] == v for n, v in plugin.items()), "the plugin's pins are requirements.txt's"
    assert "torch" not in plugin and "pytest" not in plugin
