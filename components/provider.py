"""The component served as a Pulumi package: ``pulumi package add <this repository>/provider`` runs
this (provider/PulumiPlugin.yaml names the Python runtime and provider/__main__.py, which hands
over here: ``__main__.py`` at the repository root is the stack program, not the plugin).

``schema()`` is the schema the host infers (Pulumi's analyzer over the component's type
annotations and docstrings), for the tests and for checking examples/ against it offline;
``python -m gpu_cluster.components.provider schema`` (``gpu-cluster schema``) prints it as JSON, as
``pulumi package get-schema`` would, without the Pulumi CLI.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__" and __package__ in (None, ""):
    # Run as a script (PulumiPlugin.yaml's main): the repository root holds the packages.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_cluster.components.cluster import GpuCluster  # noqa: E402
from gpu_cluster.components.problems import output_file_problem  # noqa: E402

PACKAGE = "gpu-cluster"
COMPONENTS = [GpuCluster]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(PACKAGE)
    except PackageNotFoundError:  # run from a checkout that is not installed
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


def schema() -> dict[str, Any]:
    """The package schema as the component provider host generates it."""
    from pulumi.provider.experimental.analyzer import Analyzer
    from pulumi.provider.experimental.schema import generate_schema

    result = Analyzer(PACKAGE).analyze(list(COMPONENTS))
    deps = sorted(result["dependencies"], key=lambda d: f"{d.name}{d.version}")
    out: dict[str, Any] = generate_schema(
        PACKAGE, version(), None, result["component_definitions"], result["type_definitions"], deps
    ).to_json()
    return out


def main() -> None:
    from pulumi.provider.experimental import component_provider_host

    component_provider_host(list(COMPONENTS), name=PACKAGE, version=version())


def schema_main(argv: list[str] | None = None) -> int:
    """``gpu-cluster schema [--out FILE]``: the package schema, JSON, indented as the CLI prints it."""
    parser = argparse.ArgumentParser(
        prog="gpu-cluster schema",
        description="Print the package schema of gpu-cluster as `pulumi package get-schema` would "
        "(inferred from GpuCluster's types and docstrings; no Pulumi CLI needed).",
    )
    parser.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")
    args = parser.parse_args(argv)
    if args.out and (why := output_file_problem(Path(args.out))):
        print(f"gpu-cluster schema: --out: {why}", file=sys.stderr)
        return 3
    text = json.dumps(schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    # The plugin host starts this with the engine's address; `schema` is ours alone.
    if sys.argv[1:2] == ["schema"]:
        sys.exit(schema_main(sys.argv[2:]))
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print("usage: python -m gpu_cluster.components.provider [schema [--out FILE]]   (no argument: the plugin host)")
        sys.exit(0)
    main()
