"""The AWS preflight against moto's server (boto3 through the standard AWS_ENDPOINT_URL).

moto 5.2.5 models availability zones with zone IDs, instance type offerings per zone, STS and
S3 with bucket regions. It does not model capacity reservations or capacity blocks (the EC2
call answers HTTP 500), nor the EC2/EKS service quotas (GetServiceQuota knows only "vpc"). Those
answers are recorded in the documented shape and injected with botocore's Stubber, which checks
each request and response against the service model botocore itself sends and parses.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import socket
import urllib.request
from dataclasses import replace
from typing import Any, Callable, Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

from gpu_cluster.components.preflight import Context, run_checks
from gpu_cluster.components.preflight import aws as pf
from gpu_cluster.components.preflight.__main__ import main
from gpu_cluster.components.spec import parse_spec
from tests.preflight.conftest import DEPLOYER_ADDR, DEPLOYER_NET

REGION = "us-east-1"
DATA = "pf-training-data"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    # moto's server loads a service's backend on its first request (the EC2 module, its instance-type
    # and image data, a default VPC per region): seconds of work that, on a loaded host, outran the
    # preflight's own 20 s read timeout once. Do that work here, with no timeout of the product's, so
    # the tests time the calls they make rather than moto's start.
    warm = boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id="t",
        aws_secret_access_key="t",
        config=Config(read_timeout=600, retries={"max_attempts": 1}),
    )
    warm.describe_instance_types(InstanceTypes=["p5.48xlarge"])
    yield url
    server.stop()


@pytest.fixture
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")).close()
    return moto_url


def cluster(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "pf",
        "cloud": "aws",
        "region": REGION,
        "zone": "us-east-1a",
        "compute": {"instance_type": "p5.48xlarge", "nodes": 4, "capacity": {"type": "on-demand"}},
        "storage": {
            "lustre": {"size_gib": 4800, "throughput_mbps_per_tib": 250, "import_path": f"s3://{DATA}/tokens/"}
        },
        "orchestration": {"kind": "eks", "deployer_cidrs": [DEPLOYER_NET]},
    }
    for path, value in over.items():
        node = base
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return copy.deepcopy(base)


def quota_answer(code: str, name: str, value: float, service: str = "ec2") -> dict[str, Any]:
    """GetServiceQuota's documented response (Service Quotas API reference, GetServiceQuota)."""
    return {
        "Quota": {
            "ServiceCode": service,
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)"
            if service == "ec2"
            else "Amazon Elastic Kubernetes Service (Amazon EKS)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:123456789012:{service}/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }
    }


def quotas_client(answers: list[dict[str, Any]]) -> Any:
    client = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(client)
    for a in answers:
        q = a["Quota"]
        stub.add_response("get_service_quota", a, {"ServiceCode": q["ServiceCode"], "QuotaCode": q["QuotaCode"]})
    stub.activate()
    return client


STANDARD = "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"


def good_quotas(p_vcpus: float = 1536, nodes_per_group: float = 450, standard: float = 640) -> list[dict[str, Any]]:
    return [
        quota_answer("L-417A185B", "Running On-Demand P instances", p_vcpus),
        quota_answer("L-BD136A63", "Nodes per managed node group", nodes_per_group, service="eks"),
        quota_answer("L-1216C47A", STANDARD, standard),
    ]


def make_bucket(name: str = DATA, region: str = REGION) -> None:
    s3 = boto3.client("s3", region_name=region)
    if region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})


def release_parameter_answer(name: str, value: str = "1.35.5-20251120") -> dict[str, Any]:
    """SSM GetParameter's documented response (Systems Manager API reference, GetParameter, Parameter)
    for the public EKS image parameter, which moto does not hold (it answers ParameterNotFound)."""
    return {
        "Parameter": {
            "Name": name,
            "Type": "String",
            "Value": value,
            "Version": 1,
            "LastModifiedDate": dt.datetime(2025, 11, 20, tzinfo=dt.timezone.utc),
            "ARN": f"arn:aws:ssm:{REGION}::parameter{name}",
            "DataType": "text",
        }
    }


def ssm_client(kubernetes_version: str = "1.35") -> Any:
    from gpu_cluster.components.aws.compute import eks_release_parameter

    client = boto3.client("ssm", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(client)
    name = eks_release_parameter(kubernetes_version)
    stub.add_response("get_parameter", release_parameter_answer(name), {"Name": name})
    stub.activate()
    return client


def cluster_version_answer(version: str = "1.35", status: str = "STANDARD_SUPPORT") -> dict[str, Any]:
    """EKS DescribeClusterVersions' documented response (EKS API reference, ClusterVersionInformation),
    which moto 5.2.5 does not model; dates as the EKS calendar gives them for 1.35 (versions.py)."""
    return {
        "clusterVersions": [
            {
                "clusterVersion": version,
                "clusterType": "eks",
                "defaultPlatformVersion": "eks.5",
                "defaultVersion": False,
                "releaseDate": dt.datetime(2026, 1, 28, tzinfo=dt.timezone.utc),
                "endOfStandardSupportDate": dt.datetime(2027, 3, 27, tzinfo=dt.timezone.utc),
                "endOfExtendedSupportDate": dt.datetime(2028, 3, 27, tzinfo=dt.timezone.utc),
                "status": status.lower().replace("_", "-"),
                "versionStatus": status,
                "kubernetesPatchVersion": f"{version}.0",
            }
        ]
        if status
        else []
    }


def addon_versions_answer(name: str, version: str = "1.35") -> dict[str, Any]:
    """EKS DescribeAddonVersions' documented response (EKS API reference, AddonInfo, AddonVersionInfo,
    Compatibility); the version string is illustrative, only its compatibilities are read."""
    return {
        "addons": [
            {
                "addonName": name,
                "type": "storage" if name == "aws-fsx-csi-driver" else "networking",
                "owner": "aws",
                "publisher": "eks",
                "addonVersions": [
                    {
                        "addonVersion": "v1.0.0-eksbuild.1",
                        "architecture": ["amd64", "arm64"],
                        "compatibilities": [
                            {"clusterVersion": version, "platformVersions": ["*"], "defaultVersion": True}
                        ],
                        "requiresConfiguration": False,
                    }
                ],
            }
        ]
        if version
        else []
    }


ADDONS = ("vpc-cni", "eks-pod-identity-agent", "aws-fsx-csi-driver")


def eks_client(
    version: str = "1.35",
    status: str = "STANDARD_SUPPORT",
    missing: tuple[str, ...] = (),
    offered: tuple[str, ...] = (),
) -> Any:
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(client)
    stub.add_response(
        "describe_cluster_versions",
        cluster_version_answer(version, status),
        {"clusterType": "eks", "clusterVersions": [version], "includeAll": True},
    )
    if not status or status == "UNSUPPORTED":
        listed = {"clusterVersions": [cluster_version_answer(v)["clusterVersions"][0] for v in offered]}
        stub.add_response("describe_cluster_versions", listed, {"clusterType": "eks"})
    for name in ADDONS:
        stub.add_response(
            "describe_addon_versions",
            addon_versions_answer(name, "" if name in missing else version),
            {"kubernetesVersion": version, "addonName": name},
        )
    stub.activate()
    return client


def pcs_client(*clusters: tuple[str, str]) -> Any:
    """PCS ListClusters' documented response (PCS API reference, ListClusters, ClusterSummary), one
    entry per (name, status)."""
    client = boto3.client("pcs", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(client)
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    summaries = [
        {
            "name": name,
            "id": f"pcs_{i:010d}",
            "arn": f"arn:aws:pcs:{REGION}:123456789012:cluster/pcs_{i:010d}",
            "createdAt": now,
            "modifiedAt": now,
            "status": status,
        }
        for i, (name, status) in enumerate(clusters)
    ]
    stub.add_response("list_clusters", {"clusters": summaries}, {})
    stub.activate()
    return client


def run_cli(
    write_stack: Callable[..., str],
    obj: dict[str, Any],
    quotas: list[dict[str, Any]],
    checkip_url: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    clients = replace(
        pf.AwsClients.from_environment(REGION),
        quotas=quotas_client(quotas),
        ssm=ssm_client(),
        eks=eks_client(),
        pcs=pcs_client(),
    )
    out, err = io.StringIO(), io.StringIO()
    args = [write_stack(obj)]
    if checkip_url is None:
        args.append("--no-address-check")
    elif monkeypatch is not None:
        monkeypatch.setenv("GPU_CLUSTER_CHECKIP_URL", checkip_url)
    code = main(args, aws_clients=clients, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------------------------------
# The whole command against moto


def test_a_good_on_demand_eks_stack_passes(
    aws_env: str, write_stack: Callable[..., str], checkip: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_bucket()
    code, out, err = run_cli(write_stack, cluster(), good_quotas(), checkip(DEPLOYER_ADDR), monkeypatch)
    # moto's account: us-east-1a is use1-az6; the first other zone, us-east-1b, is use1-az1.
    assert (code, out) == (0, "note: the EKS control plane's second subnet goes to us-east-1b (use1-az1)\n"), out + err
    # progress: one line per check on stderr, each with its verdict
    assert err.count("preflight [") == 15 and "[2/15] zone and its EKS zone ID ... ok" in err
    assert "EKS Kubernetes and add-on versions in the region ... ok" in err
    assert err.strip().endswith(": ok")


def test_every_problem_is_reported_at_once_with_its_path(aws_env: str, write_stack: Callable[..., str]) -> None:
    # moto's account: us-east-1e is zone ID use1-az3 (EKS refuses it); no bucket; quota too low
    obj = cluster(zone="us-east-1e")
    code, out, _ = run_cli(write_stack, obj, good_quotas(p_vcpus=384))
    lines = out.strip().splitlines()
    assert code == 2
    assert any(line.startswith("zone: us-east-1e (the GPU nodes' zone) is zone ID use1-az3") for line in lines), out
    assert any(
        line.startswith("compute.nodes: 4 x p5.48xlarge need 768 vCPUs")
        and "L-417A185B" in line
        and "allowed: at most 2 nodes" in line
        for line in lines
    ), out
    assert any(line.startswith(f"storage.lustre.import_path: bucket '{DATA}' does not exist") for line in lines), out


def test_a_type_not_offered_in_the_zone_names_the_zones_that_offer_it(
    aws_env: str, write_stack: Callable[..., str]
) -> None:
    make_bucket()
    offered = boto3.client("ec2", region_name=REGION).describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["p5en.48xlarge"]}]
    )
    zones = sorted(o["Location"] for o in offered["InstanceTypeOfferings"])
    assert zones and "us-east-1b" not in zones  # moto's offering data, read rather than assumed
    obj = cluster(zone="us-east-1b", compute__instance_type="p5en.48xlarge")
    code, out, _ = run_cli(write_stack, obj, good_quotas())
    assert code == 2
    assert f"zone: p5en.48xlarge is not offered in us-east-1b in this account (allowed: {', '.join(zones)})" in out


def test_a_bucket_in_another_region_is_refused(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket(region="us-west-2")
    code, out, _ = run_cli(write_stack, cluster(), good_quotas())
    assert code == 2
    assert out.splitlines()[0] == (
        f"storage.lustre.import_path: bucket '{DATA}' is in us-west-2, not the stack's region "
        f"us-east-1 (allowed: a bucket in us-east-1)"
    )


def test_a_checkpoint_bucket_name_already_taken_is_refused(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    make_bucket("pf-checkpoints")
    obj = cluster()
    obj["storage"]["bucket_name"] = "pf-checkpoints"
    code, out, _ = run_cli(write_stack, obj, good_quotas())
    assert code == 2 and out.startswith("storage.bucket_name: bucket 'pf-checkpoints' already exists (this account")


def test_eks_nodes_per_group_quota(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    code, out, _ = run_cli(write_stack, cluster(compute__nodes=4), good_quotas(nodes_per_group=3))
    assert code == 2
    assert (
        "compute.nodes: a managed node group of 4 nodes exceeds the EKS quota 'Nodes per managed node group' "
        "(L-BD136A63) of 3" in out
    )


def test_a_quota_code_whose_name_differs_is_could_not_check(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    wrong = [quota_answer("L-417A185B", "Running On-Demand G and VT instances", 9999), good_quotas()[1]]
    code, out, _ = run_cli(write_stack, cluster(), wrong)
    assert code == 3
    assert (
        "could not check service quotas: service quota ec2/L-417A185B is named 'Running On-Demand G and VT "
        "instances', not 'Running On-Demand P instances'" in out
    )


def test_missing_deployer_ranges_and_an_address_outside_them(
    aws_env: str, write_stack: Callable[..., str], checkip: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_bucket()
    obj = cluster()
    del obj["orchestration"]["deployer_cidrs"]
    code, out, _ = run_cli(write_stack, obj, good_quotas())
    assert code == 2 and out.startswith("orchestration.deployer_cidrs: required for eks with a public endpoint")
    code, out, _ = run_cli(write_stack, cluster(), good_quotas(), checkip("1.1.1.1"), monkeypatch)
    assert code == 2
    assert out.strip().startswith(
        f"orchestration.deployer_cidrs: this machine leaves from 1.1.1.1, which is in none of {DEPLOYER_NET}"
    )


def test_system_nodes_beyond_the_standard_vcpu_quota_are_refused(aws_env: str, write_stack: Callable[..., str]) -> None:
    # moto's DescribeInstanceTypes: c5.2xlarge has 8 vCPUs; two system nodes need 16.
    vcpus = boto3.client("ec2", region_name=REGION).describe_instance_types(InstanceTypes=["c5.2xlarge"])
    assert vcpus["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"] == 8
    make_bucket()
    code, out, _ = run_cli(write_stack, cluster(), good_quotas(standard=8))
    assert code == 2
    assert (
        "orchestration.kind: the 2 EKS system nodes, c5.2xlarge, need 16 vCPUs but the quota "
        f"'{STANDARD}' (L-1216C47A) is 8 in us-east-1"
    ) in out


def test_a_slurm_stack_asks_no_eks_quota_and_no_deployer_range(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    # moto holds no PCS sample image: the stack pins one of the Amazon images moto does hold.
    images = boto3.client("ec2", region_name=REGION).describe_images(
        Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}]
    )["Images"]
    ami, name = images[0]["ImageId"], images[0]["Name"]
    obj = cluster(zone="us-east-1e", orchestration={"kind": "slurm"}, compute__image=ami)
    p_quota, _, standard = good_quotas()
    # No EKS quota is asked (the stub holds none: a call would hit its end); the login node's is.
    code, out, err = run_cli(write_stack, obj, [p_quota, standard])
    assert (code, out) == (0, f"note: node image in {REGION}: {ami} ({name})\n"), out + err
    assert "login nodes' SSH key pair ... not applicable (no orchestration.ssh_key_name)" in err, err


def test_a_slurm_stack_s_ssh_key_pair_must_exist_in_the_region(aws_env: str, write_stack: Callable[..., str]) -> None:
    """ec2:DescribeKeyPairs against moto: a key pair the account holds passes, one it does not is
    refused at orchestration.ssh_key_name with what is allowed."""
    make_bucket()
    images = boto3.client("ec2", region_name=REGION).describe_images(
        Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}]
    )["Images"]
    boto3.client("ec2", region_name=REGION).create_key_pair(KeyName="ops")
    slurm = {"kind": "slurm", "ssh_key_name": "ops"}
    obj = cluster(zone="us-east-1e", orchestration=slurm, compute__image=images[0]["ImageId"])
    p_quota, _, standard = good_quotas()
    code, out, err = run_cli(write_stack, obj, [p_quota, standard])
    assert code == 0 and "ssh_key_name" not in out, out + err
    obj = cluster(
        zone="us-east-1e", orchestration={**slurm, "ssh_key_name": "nobody"}, compute__image=images[0]["ImageId"]
    )
    code, out, err = run_cli(write_stack, obj, [p_quota, standard])
    assert code == 2, out + err
    assert f"orchestration.ssh_key_name: key pair 'nobody' does not exist in {REGION}; allowed:" in out, out


def test_no_credentials_is_could_not_check(
    aws_env: str, write_stack: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, out, _ = run_cli(write_stack, cluster(), [])
    assert code == 3
    assert out.startswith("could not check AWS credentials: no AWS credentials found")
    # The reason once (first-hour bug, issue 26: it was repeated for each of the 8 checks; issue 47:
    # then twice, in full on the rest's line too), then the checks it kept from running, on one line.
    assert out.count("no AWS credentials found") == 1 and out.count("aws sso login") == 1, out
    (rest,) = [ln for ln in out.splitlines() if ln.startswith("not checked, for the same reason")]
    assert rest.startswith("not checked, for the same reason as AWS credentials: "), rest
    assert "S3 buckets" in rest and "deployer ranges" in rest and "AWS credentials" not in rest.split(":", 1)[1]


def test_an_unreachable_endpoint_is_could_not_check(
    aws_env: str, write_stack: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    code, out, _ = run_cli(write_stack, cluster(), [])
    assert code == 3 and out.startswith("could not check AWS credentials: AWS endpoint unreachable")


def test_a_bad_stack_file_reports_the_spec_problems(aws_env: str, write_stack: Callable[..., str]) -> None:
    code, out, _ = run_cli(write_stack, cluster(compute__nodes=0), [])
    assert code == 2 and out.startswith("compute.nodes: 0 is out of range")


# ---------------------------------------------------------------------------------------------
# Capacity reservations and blocks: recorded DescribeCapacityReservations answers (the EC2 API
# reference's CapacityReservation shape), checked by botocore's Stubber against the model.

NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
CR = "cr-0123456789abcdef0"


def reservation(**over: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "CapacityReservationId": CR,
        "OwnerId": "123456789012",
        "CapacityReservationArn": f"arn:aws:ec2:{REGION}:123456789012:capacity-reservation/{CR}",
        "AvailabilityZoneId": "use1-az6",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "Tenancy": "default",
        "TotalInstanceCount": 16,
        "AvailableInstanceCount": 16,
        "EbsOptimized": True,
        "State": "active",
        "StartDate": NOW - dt.timedelta(hours=2),
        "EndDate": NOW + dt.timedelta(days=2),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": NOW - dt.timedelta(days=3),
        "ReservationType": "capacity-block",
    }
    r.update(over)
    return r


def capacity_ctx(obj: dict[str, Any], answer: dict[str, Any] | None, error: str | None = None) -> Context:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(ec2)
    if error:
        stub.add_client_error(
            "describe_capacity_reservations",
            service_error_code=error,
            http_status_code=400,
            expected_params={"CapacityReservationIds": [CR]},
        )
    else:
        stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [answer] if answer else []},
            {"CapacityReservationIds": [CR]},
        )
    stub.activate()
    spec = parse_spec(obj)
    return Context(spec=spec, raw=obj, clients=pf.AwsClients(sts=None, ec2=ec2, s3=None, quotas=None))


def block_stack(**over: Any) -> dict[str, Any]:
    return cluster(compute__capacity={"type": "capacity-block", "id": CR}, compute__nodes=16, **over)


def problems(ctx: Context) -> list[str]:
    found = pf.check_capacity(ctx, now=NOW) + pf.check_placement(ctx)
    return [f"{p.path}: {p.reason}" for p in found]


def test_an_active_block_that_fits_passes_and_says_when_it_ends() -> None:
    ctx = capacity_ctx(block_stack(), reservation())
    assert problems(ctx) == []
    assert ctx.notes == [
        f"{CR} (capacity block) is active since 2026-12-01 07:00 UTC; it ends 2026-12-03 09:00 UTC (48 h from now)"
    ]


def test_a_scheduled_block_passes_and_says_when_it_starts() -> None:
    ctx = capacity_ctx(
        block_stack(),
        reservation(State="scheduled", StartDate=NOW + dt.timedelta(days=1), EndDate=NOW + dt.timedelta(days=8)),
    )
    assert problems(ctx) == []
    assert ctx.notes == [
        f"{CR} (capacity block) is scheduled: it starts 2026-12-02 09:00 UTC and ends "
        "2026-12-09 09:00 UTC; the GPU nodes launch only from its start: the stack can be created now, and the nodes "
        "appear then (EKS scales its node group up by itself, PCS launches them)"
    ]


def test_a_block_of_the_wrong_type_zone_and_size_is_refused_on_each_count() -> None:
    ctx = capacity_ctx(
        block_stack(),
        reservation(
            InstanceType="p5en.48xlarge",
            AvailabilityZone="us-east-1c",
            AvailabilityZoneId="use1-az2",
            TotalInstanceCount=8,
            AvailableInstanceCount=8,
        ),
    )
    assert problems(ctx) == [
        f"compute.instance_type: p5.48xlarge does not match {CR}, which reserves p5en.48xlarge (allowed: p5en.48xlarge)",
        f"zone: us-east-1a does not match {CR}, which is in us-east-1c (zone ID use1-az2; allowed: us-east-1c)",
        f"compute.nodes: 16 nodes do not fit {CR}, which holds 8 instances (allowed: 1..8)",
    ]


def test_the_block_s_zone_is_compared_by_zone_id_when_the_stack_s_is_known() -> None:
    # The stack names use1-az6 (the block's ID): a zone name that reads differently elsewhere is no
    # mismatch; the same name with another ID is one (the subnets are placed by ID).
    assert problems(capacity_ctx(block_stack(zone_id="use1-az6"), reservation())) == []
    found = problems(capacity_ctx(block_stack(zone_id="use1-az4"), reservation()))
    assert found == [
        f"zone: us-east-1a (zone ID use1-az4) does not match {CR}, which is in us-east-1a "
        "(zone ID use1-az6; allowed: us-east-1a, zone_id use1-az6)"
    ]


def test_an_expired_block_and_an_odcr_named_as_a_block_are_refused() -> None:
    ctx = capacity_ctx(block_stack(), reservation(State="expired", ReservationType="default"))
    assert problems(ctx) == [
        f"compute.capacity.type: {CR} is a capacity reservation (ODCR), not a capacity block (allowed: reservation)",
        f"compute.capacity.id: {CR} is 'expired' (allowed: active, scheduled)",
    ]


def test_instances_in_use_by_other_launches_leave_too_few() -> None:
    obj = cluster(compute__capacity={"type": "reservation", "id": CR}, compute__nodes=4)
    answer = reservation(
        ReservationType="default", TotalInstanceCount=4, AvailableInstanceCount=1, EndDateType="unlimited"
    )
    del answer["EndDate"]
    ctx = capacity_ctx(obj, answer)
    assert problems(ctx) == [
        f"compute.nodes: 4 nodes do not fit {CR}: 3 of its 4 instances are in use by other "
        "launches, 1 free (allowed: 1..1)"
    ]
    assert ctx.notes == [f"{CR} (capacity reservation) is active, with no end date"]


def test_a_missing_reservation_is_refused() -> None:
    ctx = capacity_ctx(block_stack(), None, error="InvalidCapacityReservationId.NotFound")
    assert problems(ctx) == [
        f"compute.capacity.id: {CR} is no capacity block this account can see in us-east-1 "
        "(allowed: an id from `aws ec2 describe-capacity-reservations`)"
    ]


def _odcr_in_train_pg(capacity: dict[str, str]) -> Context:
    """A 4-node stack on reservation CR (plus ``capacity``), which was made in placement group train-pg."""
    obj = cluster(compute__capacity={"type": "reservation", "id": CR, **capacity}, compute__nodes=4)
    return capacity_ctx(
        obj,
        reservation(
            ReservationType="default",
            TotalInstanceCount=4,
            AvailableInstanceCount=4,
            PlacementGroupArn=f"arn:aws:ec2:{REGION}:123456789012:placement-group/train-pg",
        ),
    )


def test_an_odcr_made_in_a_placement_group_does_not_match_a_launch_without_one() -> None:
    ctx = _odcr_in_train_pg({})
    assert not ctx.spec.interconnect.placement
    assert problems(ctx) == [
        f"compute.capacity.placement_group: {CR} was made in cluster placement group 'train-pg'; "
        "it matches only launches into that group, and this stack launches into none, so no "
        "node would use the reservation (allowed: placement_group: train-pg)"
    ]
    # Naming the group the reservation was made in is what makes it match.
    ctx = _odcr_in_train_pg({"placement_group": "train-pg"})
    assert [p for p in problems(ctx) if "placement" in p] == []
    ctx = _odcr_in_train_pg({"placement_group": "other-pg"})
    assert any("launches into other-pg; only launches into 'train-pg' match it" in p for p in problems(ctx))


def test_the_capacity_checks_run_in_the_runner_with_one_call() -> None:
    ctx = capacity_ctx(block_stack(), reservation())
    result = run_checks(
        ctx, [c for c in pf.checks(None) if c.name.startswith(("capacity", "placement"))], progress=io.StringIO()
    )
    assert result.exit_code == 0 and result.problems == []  # the Stubber held one answer: the cache shared it


def test_a_zone_the_account_lacks_is_refused(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    zones = [
        z["ZoneName"]
        for z in boto3.client("ec2", region_name=REGION).describe_availability_zones()["AvailabilityZones"]
    ]
    assert "us-east-1g" not in zones
    code, out, _ = run_cli(write_stack, cluster(zone="us-east-1g", orchestration={"kind": "slurm"}), good_quotas()[:1])
    assert code == 2
    assert out.splitlines()[0] == (
        "zone: 'us-east-1g' is not a zone this account has in us-east-1 (allowed: us-east-1a (use1-az6), "
        "us-east-1b (use1-az1), us-east-1c (use1-az2), us-east-1d (use1-az4), us-east-1e (use1-az3), "
        "us-east-1f (use1-az5); `aws ec2 describe-availability-zones --region us-east-1`)"
    )


def test_zone_and_zone_id_that_disagree_in_this_account_are_refused(
    aws_env: str, write_stack: Callable[..., str]
) -> None:
    # moto's account: us-east-1a is use1-az6, use1-az4 is us-east-1d.
    make_bucket()
    code, out, _ = run_cli(write_stack, cluster(zone_id="use1-az4"), good_quotas())
    assert code == 2
    assert (
        "zone_id: us-east-1a is zone ID use1-az6 in this account, not use1-az4 (allowed: zone_id use1-az6, "
        "or zone us-east-1d, which is use1-az4 here)"
    ) in out.splitlines()


def test_the_second_zone_is_chosen_by_id_and_a_missing_one_is_refused(
    aws_env: str, write_stack: Callable[..., str]
) -> None:
    make_bucket()
    ctx = Context(
        spec=parse_spec(cluster(zone="us-east-1d")),
        raw={},
        clients=pf.AwsClients.from_environment(REGION),
    )
    assert pf.check_zone(ctx) == []
    # The first zone by name besides the nodes' (moto: us-east-1a, use1-az6), as the program picks it.
    assert ctx.notes == ["the EKS control plane's second subnet goes to us-east-1a (use1-az6)"]
    # A given control-plane zone ID the account lacks: refused before `pulumi up`, with the IDs it has.
    obj = cluster(zone="us-east-1d", network={"control_plane_zone_id": "use1-az7"})
    code, out, _ = run_cli(write_stack, obj, good_quotas())
    assert code == 2
    (line,) = [ln for ln in out.splitlines() if ln.startswith("network.control_plane_zone_id:")]
    assert "use1-az7 is not a zone ID this account has in us-east-1" in line and "us-east-1a (use1-az6)" in line


def test_the_catalog_s_efa_and_card_counts_are_what_ec2_says(aws_env: str) -> None:
    # moto's DescribeInstanceTypes data for p5.48xlarge: 32 cards, 32 EFA interfaces, 192 vCPUs; the catalog agrees.
    ctx = Context(spec=parse_spec(cluster()), raw={}, clients=pf.AwsClients.from_environment(REGION))
    assert pf.check_instance_facts(ctx) == []


def instance_type_answer(cards: int, efa: int, vcpus: int = 192) -> dict[str, Any]:
    """DescribeInstanceTypes' documented response (EC2 API reference, InstanceTypeInfo, NetworkInfo, EfaInfo)."""
    return {
        "InstanceTypes": [
            {
                "InstanceType": "p5.48xlarge",
                "VCpuInfo": {"DefaultVCpus": vcpus},
                "NetworkInfo": {
                    "NetworkPerformance": "3200 Gigabit",
                    "MaximumNetworkInterfaces": 64,
                    "MaximumNetworkCards": cards,
                    "DefaultNetworkCardIndex": 0,
                    "EfaSupported": True,
                    "EfaInfo": {"MaximumEfaInterfaces": efa},
                },
            }
        ]
    }


def test_an_efa_count_that_differs_from_the_catalog_is_reported() -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(ec2)
    stub.add_response(
        "describe_instance_types", instance_type_answer(cards=32, efa=16), {"InstanceTypes": ["p5.48xlarge"]}
    )
    stub.activate()
    ctx = Context(spec=parse_spec(cluster()), raw={}, clients=pf.AwsClients(sts=None, ec2=ec2, s3=None, quotas=None))
    (problem,) = pf.check_instance_facts(ctx)
    assert problem.path == "compute.instance_type"
    assert problem.reason.startswith(
        "EC2 says p5.48xlarge has 16 EFA interfaces in us-east-1, the catalog's p5.48xlarge entry "
        "(components/catalog.yaml, network source karpenter-types) says 32"
    )


def b200_ctx(cards: int, efa: int) -> Context:
    """The bundled aws-b200-capacity-block stack, with EC2 answering DescribeInstanceTypes for
    p6-b200.48xlarge in its region (moto 5.2.5 has no data for the type: a stub, in the API's shape)."""
    from gpu_cluster.components.stack_file import read_stack_file

    _, raw = read_stack_file("aws-b200-capacity-block")
    obj = copy.deepcopy(raw)
    obj["orchestration"]["deployer_cidrs"] = [DEPLOYER_NET]
    ec2 = boto3.client("ec2", region_name=obj["region"], aws_access_key_id="t", aws_secret_access_key="t")
    answer = instance_type_answer(cards=cards, efa=efa)
    answer["InstanceTypes"][0]["InstanceType"] = "p6-b200.48xlarge"
    stub = Stubber(ec2)
    stub.add_response("describe_instance_types", answer, {"InstanceTypes": ["p6-b200.48xlarge"]})
    stub.activate()
    return Context(spec=parse_spec(obj), raw=obj, clients=pf.AwsClients(sts=None, ec2=ec2, s3=None, quotas=None))


def test_the_b200_stack_s_card_and_efa_counts_are_the_references():
    # The figures EC2 would answer, written out from the references rather than read from the
    # catalog: 8 network cards (aws/amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go at b521883,
    # generated from DescribeInstanceTypes), 8 EFA and 192 vCPUs (Karpenter's instance types).
    assert pf.check_instance_facts(b200_ctx(cards=8, efa=8)) == []
    # A type with twice the EFA per card (as p6-b300's 16 EFA on 8 cards, vpc_ip_resource_limit.go)
    # is what the check exists to catch: the launch template would leave half of them unused.
    (problem,) = pf.check_instance_facts(b200_ctx(cards=8, efa=16))
    assert problem.path == "compute.instance_type"
    assert problem.reason.startswith(
        "EC2 says p6-b200.48xlarge has 16 EFA interfaces in us-east-2, the catalog's p6-b200.48xlarge entry"
    )


def test_spot_nodes_are_held_to_the_spot_p_quota(aws_env: str, write_stack: Callable[..., str]) -> None:
    make_bucket()
    spot = [quota_answer("L-7212CCBC", "All P Spot Instance Requests", 192), good_quotas()[1]]
    code, out, _ = run_cli(write_stack, cluster(compute__capacity={"type": "spot"}), spot)
    assert code == 2
    assert out.splitlines()[0] == (
        "compute.nodes: 4 x p5.48xlarge need 768 vCPUs but the quota 'All P Spot Instance Requests' "
        "(L-7212CCBC) is 192 in us-east-1, before any running instance counts against it (allowed: "
        "at most 1 nodes, or request an increase)"
    )


def test_a_reservation_asks_no_vcpu_quota(aws_env: str, write_stack: Callable[..., str]) -> None:
    ctx = capacity_ctx(block_stack(), reservation())
    ctx = replace(ctx, clients=replace(ctx.clients, quotas=quotas_client([good_quotas()[1]])))
    assert pf.check_quotas(ctx) == []  # only the EKS node-group quota was asked (the stub held only that)


def test_the_eks_image_parameter_missing_in_the_region_is_refused(aws_env: str) -> None:
    # moto's own SSM answer for the public parameter: ParameterNotFound.
    ctx = Context(spec=parse_spec(cluster()), raw={}, clients=pf.AwsClients.from_environment(REGION))
    (problem,) = pf.check_node_image(ctx)
    assert problem.path == "orchestration.kubernetes_version"
    assert "no EKS AL2023 NVIDIA image for Kubernetes 1.35" in problem.reason
    assert (
        "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
        in problem.reason
    )
    ctx = replace(ctx, clients=replace(ctx.clients, ssm=ssm_client()))
    assert pf.check_node_image(ctx) == []


def images_client(images: list[dict[str, Any]]) -> Any:
    from gpu_cluster.components.aws.compute import pcs_ami_name_filter

    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(ec2)
    query = {
        "Owners": ["amazon"],
        "Filters": [
            {"Name": "name", "Values": [pcs_ami_name_filter()]},
            {"Name": "architecture", "Values": ["x86_64"]},
        ],
    }
    stub.add_response("describe_images", {"Images": images}, query)
    stub.activate()
    return ec2


def test_the_pcs_sample_image_is_looked_up_as_the_program_does() -> None:
    """DescribeImages' documented response (EC2 API reference, Image) for the PCS sample image; moto
    holds none, so the recorded answer stands in, checked by botocore against the service model."""
    obj = cluster(orchestration={"kind": "slurm"})
    image = {
        "ImageId": "ami-0123456789abcdef0",
        "Name": "aws-pcs-sample_ami-al2023-x86_64-slurm-25.11-2025-11-01T00-00-00.000Z",
        "State": "available",
        "Architecture": "x86_64",
        "CreationDate": "2025-11-01T00:00:00.000Z",
        "OwnerId": "137112412989",
        "ImageOwnerAlias": "amazon",
    }
    ctx = Context(
        spec=parse_spec(obj), raw=obj, clients=pf.AwsClients(sts=None, ec2=images_client([image]), s3=None, quotas=None)
    )
    assert pf.check_node_image(ctx) == [] and ctx.notes == [
        f"node image in {REGION}: ami-0123456789abcdef0 ({image['Name']})"
    ]
    ctx = Context(
        spec=parse_spec(obj), raw=obj, clients=pf.AwsClients(sts=None, ec2=images_client([]), s3=None, quotas=None)
    )
    (problem,) = pf.check_node_image(ctx)
    assert (
        problem.path == "compute.image"
        and "no AWS PCS sample image aws-pcs-sample_ami-al2023-x86_64-slurm-25.11*" in problem.reason
    )


# ---------------------------------------------------------------------------------------------
# EKS versions and add-ons, PCS in the region: recorded answers (moto 5.2.5 models neither)


def _eks_ctx(eks: Any, **over: Any) -> Context:
    obj = cluster(**over)
    return Context(
        spec=parse_spec(obj), raw=obj, clients=pf.AwsClients(sts=None, ec2=None, s3=None, quotas=None, eks=eks)
    )


def test_the_eks_version_and_every_addon_offered_pass() -> None:
    ctx = _eks_ctx(eks_client())
    assert pf.check_eks_versions(ctx) == [] and ctx.notes == []


def test_an_eks_version_the_region_does_not_offer_names_the_offered_ones() -> None:
    ctx = _eks_ctx(eks_client("1.36", status="", offered=("1.34", "1.35")), orchestration__kubernetes_version="1.36")
    [problem] = pf.check_eks_versions(ctx)
    assert problem.path == "orchestration.kubernetes_version"
    assert "offers no Kubernetes 1.36 in us-east-1" in problem.reason and "(allowed: 1.34, 1.35)" in problem.reason


def test_an_addon_without_a_version_for_the_cluster_is_refused() -> None:
    [problem] = pf.check_eks_versions(_eks_ctx(eks_client(missing=("aws-fsx-csi-driver",))))
    assert problem.path == "orchestration.kubernetes_version"
    assert problem.reason.startswith("EKS has no aws-fsx-csi-driver add-on version for Kubernetes 1.35")


def test_an_eks_version_in_extended_support_is_a_note_with_its_end() -> None:
    ctx = _eks_ctx(eks_client(status="EXTENDED_SUPPORT"))
    assert pf.check_eks_versions(ctx) == []
    assert ctx.notes == [
        "EKS 1.35 is in extended support in us-east-1 until 2028-03-27 00:00 UTC: the control plane pays the "
        "extended-support price per hour (EKS user guide kubernetes-versions)"
    ]


def test_pcs_answering_passes_and_a_region_without_it_is_refused() -> None:
    obj = cluster(orchestration={"kind": "slurm"})
    spec = parse_spec(obj)
    ok = Context(spec=spec, raw=obj, clients=pf.AwsClients(sts=None, ec2=None, s3=None, quotas=None, pcs=pcs_client()))
    assert pf.check_pcs_available(ok) == []
    other = Context(
        spec=spec,
        raw=obj,
        clients=pf.AwsClients(
            sts=None, ec2=None, s3=None, quotas=None, pcs=pcs_client(("old", "ACTIVE"), ("team-b", "CREATING"))
        ),
    )
    [busy] = pf.check_pcs_available(other)
    assert busy.path == "orchestration.kind" and busy.reason.startswith("PCS cluster team-b is being created")
    assert "ServiceQuotaExceededException" in busy.reason
    # A region PCS is not in: its endpoint name does not resolve (a reserved .invalid name here).
    absent = boto3.client(
        "pcs",
        region_name=REGION,
        endpoint_url="https://pcs.example.invalid",
        aws_access_key_id="t",
        aws_secret_access_key="t",
        config=Config(retries={"max_attempts": 1}),
    )
    ctx = Context(spec=spec, raw=obj, clients=pf.AwsClients(sts=None, ec2=None, s3=None, quotas=None, pcs=absent))
    [problem] = pf.check_pcs_available(ctx)
    assert problem.path == "region" and "AWS PCS does not answer in us-east-1" in problem.reason


# ---------------------------------------------------------------------------------------------
# The pull-through cache prefix. moto 5.2.5 does not model ECR's pull-through cache rules (its ECR
# responses have no DescribePullThroughCacheRules), so the documented answers are injected with
# botocore's Stubber, which checks request and response against the ECR service model.


def cache_ctx(answer: dict[str, Any] | None) -> Context:
    from gpu_cluster.components.aws.common import cache_prefix

    obj = cluster(orchestration={"kind": "eks", "deployer_cidrs": [DEPLOYER_NET], "pull_through_cache": True})
    ecr = boto3.client("ecr", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    stub = Stubber(ecr)
    expected = {"ecrRepositoryPrefixes": [cache_prefix("pf")]}
    if answer is None:
        stub.add_client_error(
            "describe_pull_through_cache_rules", "PullThroughCacheRuleNotFoundException", expected_params=expected
        )
    else:
        stub.add_response("describe_pull_through_cache_rules", answer, expected)
    stub.activate()
    return Context(
        spec=parse_spec(obj), raw=obj, clients=pf.AwsClients(sts=None, ec2=None, s3=None, quotas=None, ecr=ecr)
    )


def cache_rule(upstream: str) -> dict[str, Any]:
    """DescribePullThroughCacheRules' documented response (ECR API reference)."""
    return {
        "pullThroughCacheRules": [
            {"ecrRepositoryPrefix": "pf-ecr-public", "upstreamRegistryUrl": upstream, "registryId": "123456789012"}
        ]
    }


def test_a_free_cache_prefix_passes() -> None:
    ctx = cache_ctx(None)
    assert pf.check_cache_prefix(ctx) == [] and ctx.notes == []


def test_a_cache_prefix_held_for_another_registry_is_refused() -> None:
    (problem,) = pf.check_cache_prefix(cache_ctx(cache_rule("registry-1.docker.io")))
    assert problem.path == "orchestration.pull_through_cache"
    assert (
        "'pf-ecr-public' is already held in us-east-1 by a rule for 'registry-1.docker.io'; allowed:" in problem.reason
    )


def test_a_cache_prefix_held_for_ecr_public_is_a_note() -> None:
    ctx = cache_ctx(cache_rule("public.ecr.aws"))
    assert pf.check_cache_prefix(ctx) == []
    assert ctx.notes and "already has a rule for public.ecr.aws" in ctx.notes[0]
