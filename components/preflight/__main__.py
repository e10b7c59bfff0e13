"""``python -m gpu_cluster.components.preflight STACK``: ask the account what ``pulumi up`` would find out.

Problems print as ``config path: reason`` on stdout, all at once; progress per check on stderr.
Exit 0 ok, 2 problems (the stack file's own problems too), 3 could not check (no credentials,
an endpoint that does not answer, a permission missing: the line says which).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import Any, Sequence, TextIO

import yaml

from gpu_cluster.components.stack_locate import STACK_HELP
from gpu_cluster.components.preflight import CHECKIP_URL, PROBLEMS, UNCHECKED, Context, render, run_checks
from gpu_cluster.components.spec import SpecError, default_name, parse_spec, read_stack_file, stack_path


def _stack_config(stack: str) -> dict[str, Any]:
    """The stack file's whole ``config:`` mapping (provider settings such as ``gcp:project``)."""
    doc = yaml.safe_load(stack_path(stack).read_text(encoding="utf-8"))
    return dict(doc.get("config") or {})


def main(
    argv: Sequence[str] | None = None,
    *,
    aws_clients: Any = None,
    gcp_clients: Any = None,
    azure_clients: Any = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    ap = argparse.ArgumentParser(
        prog="gpu-cluster preflight", description="Check a stack against the cloud account before `pulumi up`."
    )
    ap.add_argument("stack", help=STACK_HELP)
    ap.add_argument("--project", help="GCP project (default: the stack's gcp:project, then GOOGLE_CLOUD_PROJECT)")
    ap.add_argument(
        "--no-address-check",
        action="store_true",
        help=f"do not ask {CHECKIP_URL} for this machine's address (deployer_cidrs are still required)",
    )
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        name, raw = read_stack_file(args.stack)
        # The placeholder keeps a missing deployer_cidrs from hiding every other finding; the
        # deployer-ranges check reports it as a problem like the rest.
        spec = parse_spec(raw, default_name=default_name(name), deployer_placeholder=True)
    except SpecError as exc:
        for path, reason in exc.problems:
            print(f"{path}: {reason}", file=out)
        return PROBLEMS
    checkip = None if args.no_address_check else os.environ.get("GPU_CLUSTER_CHECKIP_URL", CHECKIP_URL)
    # The cloud's checks, and so its client library, before anything is said: where the
    # [preflight] extra is missing, `gpu-cluster preflight` says only the line naming it.
    importlib.import_module(f"gpu_cluster.components.preflight.{spec.cloud}")
    print(
        f"preflight: {name} ({spec.cloud} {spec.region}/{spec.zone}, {spec.compute.nodes} x "
        f"{spec.compute.instance_type}, {spec.compute.capacity.type}, {spec.orchestration.kind})",
        file=err,
    )
    if spec.cloud == "aws":
        import gpu_cluster.components.preflight.aws as aws

        clients = aws_clients or aws.AwsClients.from_environment(spec.region)
        checks = aws.checks(checkip)
    elif spec.cloud == "azure":
        import gpu_cluster.components.preflight.azure as az

        try:
            clients = azure_clients or az.AzureClients.from_environment(
                _stack_config(args.stack).get("azure-native:subscriptionId")
            )
        except az.Fatal as exc:
            print(f"could not check anything: {exc}", file=out)
            return UNCHECKED
        checks = az.checks(checkip)
    else:
        import gpu_cluster.components.preflight.gcp as gcp

        project = args.project or _stack_config(args.stack).get("gcp:project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
        if not project:
            print(
                "gcp:project: required to check a GCP stack (allowed: the stack's gcp:project, --project, "
                "or GOOGLE_CLOUD_PROJECT)",
                file=out,
            )
            return UNCHECKED
        try:
            clients = gcp_clients or gcp.GcpClients.from_environment(str(project))
        except gcp.Fatal as exc:
            print(f"could not check anything: {exc}", file=out)
            return UNCHECKED
        checks = gcp.checks(checkip)
    result = run_checks(Context(spec=spec, raw=raw, clients=clients), checks, progress=err)
    render(result, out)
    verdict = {0: "ok", 2: f"{len(result.problems)} problem(s)", 3: "could not check everything"}[result.exit_code]
    print(f"preflight: {name}: {verdict}", file=err)
    return result.exit_code


if __name__ == "__main__":
    # Google's libraries warn about the Python version on import; the preflight's output is the verdict.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\..*")
    raise SystemExit(main())
