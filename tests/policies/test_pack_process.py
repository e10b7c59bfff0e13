"""The pack as the Pulumi CLI runs it: ``policies/__main__.py`` in its own process, spoken to over
the analyzer gRPC protocol. No engine is needed for that; the CLI would only add the plumbing.

The pack is never imported (``PolicyPack()`` serves forever); the process is started here and
ended by its own pid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import grpc  # type: ignore[import-untyped]
import pytest
from google.protobuf import empty_pb2, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from gpu_cluster.components.engine import Recorded
from gpu_cluster.policies.rules import ALL_RULES, RESOURCE_RULES
from tests.policies.pending import pending
from tests.policies.sdk_program import OTHER_KEY, Recording

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    # Pulumi starts a Python pack as the program in its directory; the pack puts the
    # repository root on sys.path itself, so the working directory is the pack's own.
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "policies" / "__main__.py")],
        cwd=ROOT / "policies",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), f"pack did not print its port: {port!r} {proc.stderr.read() if proc.stderr else ''}"
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(json.loads(json.dumps(value)))
    return s


def _analyze(stub: analyzer_pb2_grpc.AnalyzerStub, res: Recorded) -> list[Any]:
    request = analyzer_pb2.AnalyzeRequest(
        type=res.type,
        properties=_struct(res.inputs),
        urn=res.urn,
        name=res.name,
        options=analyzer_pb2.AnalyzerResourceOptions(protect=res.protect),
    )
    return list(stub.Analyze(request, timeout=60).diagnostics)


def test_pack_announces_every_rule(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=60)
    assert info.name == "gpu-cluster-security"
    by_name = {p.name: p for p in info.policies}
    assert set(by_name) == {r.name for r in ALL_RULES}
    for r in ALL_RULES:
        level = analyzer_pb2.MANDATORY if r.enforcement == "mandatory" else analyzer_pb2.ADVISORY
        assert by_name[r.name].enforcementLevel == level, r.name
        assert "lustreKmsKeyId" in by_name[r.name].configSchema.properties
        assert list(by_name[r.name].tags) == list(r.ids)
    resource = {r.name for r in RESOURCE_RULES}
    assert all((p.policy_type == analyzer_pb2.POLICY_TYPE_RESOURCE) == (p.name in resource) for p in info.policies)


def test_pack_passes_a_good_resource_and_blocks_a_broken_one(
    analyzer: analyzer_pb2_grpc.AnalyzerStub, aws_rec: Recording
) -> None:
    assert _analyze(analyzer, aws_rec.get("lt-ok")) == []
    found = _analyze(analyzer, aws_rec.get("lt-imdsv1"))
    assert [(d.policyName, d.enforcementLevel) for d in found] == [("imdsv2-required", analyzer_pb2.MANDATORY)]
    assert "httpTokens is 'optional'" in found[0].message and "CKV_AWS_79" in found[0].message
    # protect travels in the resource options, as the engine sends it.
    assert [d.policyName for d in _analyze(analyzer, aws_rec.get("fsx-bad"))] == ["lustre-protected"]


def test_pack_config_reaches_the_rules(analyzer: analyzer_pb2_grpc.AnalyzerStub, aws_rec: Recording) -> None:
    fsx = aws_rec.get("fsx-ok")
    assert _analyze(analyzer, fsx) == []
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "lustre-encrypted-cmk": analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.MANDATORY, properties=_struct({"lustreKmsKeyId": OTHER_KEY})
                )
            }
        ),
        timeout=60,
    )
    try:
        found = _analyze(analyzer, fsx)
        assert [d.policyName for d in found] == ["lustre-encrypted-cmk"]
        assert "the stack's config names" in found[0].message
    finally:
        analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={}), timeout=60)


def test_pack_checks_a_stack(analyzer: analyzer_pb2_grpc.AnalyzerStub, aws_rec: Recording) -> None:
    def resource(name: str) -> Any:
        r = aws_rec.get(name)
        deps = aws_rec.property_dependencies.get(r.urn, {})
        return analyzer_pb2.AnalyzerResource(
            type=r.type,
            properties=_struct(r.inputs),
            urn=r.urn,
            name=r.name,
            options=analyzer_pb2.AnalyzerResourceOptions(protect=r.protect),
            propertyDependencies={k: analyzer_pb2.AnalyzerPropertyDependencies(urns=v) for k, v in deps.items()},
        )

    ok = analyzer.AnalyzeStack(
        analyzer_pb2.AnalyzeStackRequest(
            resources=[
                resource(n)
                for n in (
                    "bucket-ok",
                    "bucket-ok-pab",
                    "bucket-ok-logging",
                    "bucket-logs",
                    "bucket-logs-pab",
                    "lt-ok",
                    "sg-ok",
                    "pg",
                )
            ]
        ),
        timeout=60,
    )
    assert list(ok.diagnostics) == []
    bad = analyzer.AnalyzeStack(
        analyzer_pb2.AnalyzeStackRequest(
            resources=[resource("bucket-bare"), resource("lt-half-sg"), resource("sg-ingress-only")]
        ),
        timeout=60,
    )
    assert sorted((d.policyName, d.urn) for d in bad.diagnostics) == sorted(
        [
            ("s3-public-access-blocked", aws_rec.get("bucket-bare").urn),
            ("bucket-access-logging", aws_rec.get("bucket-bare").urn),
            ("efa-sg-self-traffic", aws_rec.get("lt-half-sg").urn),
            ("efa-placement", aws_rec.get("lt-half-sg").urn),  # no placement group in this stack
        ]
    )


@pytest.mark.parametrize("stack", ["aws-h100-eks", "aws-h200-slurm", "gcp-h100-gke", "gcp-h200-gke", "gcp-h200-slurm"])
def test_pack_passes_every_resource_of_a_bundled_stack(analyzer: analyzer_pb2_grpc.AnalyzerStub, stack: str) -> None:
    # The real components' resources, through the pack's own process (CrossGuard's proxies
    # included): nothing mandatory may fire.
    from tests.policies.test_offline import bundled_run

    run = bundled_run(stack)
    mandatory = [
        (r.name, d.policyName, d.message)
        for r in run.resources
        if r.custom
        for d in _analyze(analyzer, r)
        if d.enforcementLevel == analyzer_pb2.MANDATORY
    ]
    # Only the resource rules among the findings tests/policies/pending.py lists for the stack.
    expected = pending(stack) & {r.name for r in RESOURCE_RULES}
    assert {name for _, name, _ in mandatory} == expected, mandatory
    # ... and the broken launch template is caught there too.
    if stack.startswith("aws"):
        from tests.policies.test_offline import _break_imds

        broken = _break_imds(run)[1]
        found = _analyze(analyzer, broken)
        assert [d.policyName for d in found] == ["imdsv2-required"]
        assert "httpTokens is 'optional'" in found[0].message
