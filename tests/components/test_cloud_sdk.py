"""Each cloud's SDKs are that cloud's extra ([aws], [gcp], [azure]): a plan never imports another
cloud's, and a stack planned or run without its own stops with one line naming the packages and the
command that installs them, no traceback.

The missing SDK is simulated in a process of its own (``sys.modules['pulumi_azure_native'] = None``:
the import system then answers as for a package that is not installed), never by uninstalling it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gpu_cluster.components.cloud_sdk import EXTRA_SDKS

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'gpu-cluster[azure]'"
_WITHOUT_AZURE = "import sys; sys.modules['pulumi_azure_native'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env()
    )


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_planning_an_azure_stack_without_the_extra_says_what_to_install() -> None:
    proc = _python(_WITHOUT_AZURE + "from gpu_cluster.cli import main; sys.exit(main(['plan', 'azure-h100-aks']))")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    (line,) = [ln for ln in lines if "pulumi-azure-native" in ln]
    assert line.startswith("gpu-cluster: azure-h100-aks: cloud: azure needs the Python package pulumi-azure-native")
    assert line.endswith(INSTALL), line
    assert lines[-1] == "gpu-cluster: 1 stack(s) could not be planned here: azure-h100-aks"
    assert proc.stdout == "", "nothing is planned"


def test_plan_all_without_the_extra_plans_every_other_stack() -> None:
    """One Azure stack missing its SDK does not stop the others, and the plan of the rest is whole."""
    proc = _python(
        _WITHOUT_AZURE + "from gpu_cluster.cli import main; rc = main(['plan', '--all', '--json', '-'])\n"
        "print('AZURE_LOADED', 'pulumi_azure_native' in {k for k, v in sys.modules.items() if v is not None})\n"
        "sys.exit(rc)"
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    stacks = sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
    )
    azure = [s for s in stacks if s.startswith("azure-")]
    assert azure, "the bundled stacks include Azure ones"
    refused = [ln for ln in proc.stderr.splitlines() if ln.endswith(INSTALL)]
    assert [ln.split(":")[1].strip() for ln in refused] == azure
    *plans, loaded = proc.stdout.splitlines()
    planned = json.loads("\n".join(plans))
    assert [p["stack"] for p in planned] == [s for s in stacks if s not in azure]
    assert all(p["resources"] for p in planned)
    assert loaded == "AZURE_LOADED False"


def test_running_an_azure_stack_without_the_extra_is_a_clean_pulumi_error() -> None:
    """`pulumi up` runs gpu_cluster.components.program.build; what it raises is a pulumi.RunError (reported by
    Pulumi's host as one error line, no stack trace) carrying the same words."""
    proc = _python(
        _WITHOUT_AZURE + "import pulumi\n"
        "from gpu_cluster.components.engine import run_offline\n"
        "from gpu_cluster.components.cloud_sdk import MissingCloudSdk\n"
        "from gpu_cluster.components.spec import read_stack_file\n"
        "name, raw = read_stack_file('azure-mi300x-aks')\n"
        "try:\n"
        "    run_offline(name, raw)\n"
        "except MissingCloudSdk as err:\n"
        "    print(isinstance(err, pulumi.RunError), err)\n"
    )
    assert proc.returncode == 0, proc.stderr
    ok, _, message = proc.stdout.strip().partition(" ")
    assert ok == "True"
    assert message == (
        "cloud: azure needs the Python package pulumi-azure-native, which is not installed "
        f"(it is gpu-cluster's [azure] extra): run {INSTALL}"
    )


@pytest.mark.parametrize(
    ("stack", "hidden", "line"),
    [
        (
            "aws-h200-slurm",
            ("pulumi_aws", "pulumi_aws_native"),
            "cloud: aws needs the Python packages pulumi-aws and pulumi-aws-native, which are not installed "
            "(they are gpu-cluster's [aws] extra): run pip install 'gpu-cluster[aws]'",
        ),
        (
            "gcp-h200-slurm",
            ("pulumi_gcp",),
            "cloud: gcp needs the Python package pulumi-gcp, which is not installed "
            "(it is gpu-cluster's [gcp] extra): run pip install 'gpu-cluster[gcp]'",
        ),
    ],
)
def test_a_stack_without_its_clouds_extra_says_what_to_install(stack: str, hidden: tuple[str, ...], line: str) -> None:
    hide = "".join(f"sys.modules[{m!r}] = None\n" for m in hidden)
    proc = _python(f"import sys\n{hide}from gpu_cluster.cli import main; sys.exit(main(['plan', {stack!r}]))")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert f"gpu-cluster: {stack}: {line}" in proc.stderr.splitlines()


def test_an_aws_stack_plans_without_the_other_clouds_sdks() -> None:
    """What an AWS-only install has: neither GCP's nor Azure's SDK (hidden), and the plan is whole."""
    proc = _python(
        "import sys; sys.modules['pulumi_gcp'] = None; sys.modules['pulumi_azure_native'] = None\n"
        "import contextlib, io\n"
        "from gpu_cluster.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['plan', 'aws-h200-slurm'])\n"
        "print(rc)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_aws_and_gcp_plans_do_not_import_the_azure_sdk() -> None:
    """With the SDK installed (this virtualenv has it), planning AWS and GCP stacks, policy pack
    included, leaves it unimported; the same process then plans an Azure stack, which does load it
    (so the probe can see an import)."""
    proc = _python(
        "import contextlib, io, sys\n"
        "from gpu_cluster.cli import main\n"
        "rcs = []\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for stack in ('aws-h100-eks', 'aws-h200-slurm', 'gcp-h100-gke', 'gcp-h200-slurm'):\n"
        "        rcs.append(main(['plan', stack, '--policy']))\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] == 'pulumi_azure_native')\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rcs.append(main(['plan', 'azure-h100-aks']))\n"
        "print(rcs, before, 'pulumi_azure_native' in sys.modules)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 0, 0, 0, 0] [] True"


def test_the_extra_is_declared_where_the_message_says() -> None:
    """pyproject: the SDK is in its extra, not in the core; requirements.txt (what `make` installs)
    still pins it; constraints-lowest.txt holds the extra's floor."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {Requirement(r).name.lower() for r in project["dependencies"]}
    pins = {
        ln.split("==")[0].lower(): ln.split("==")[1]
        for ln in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if "==" in ln and not ln.startswith("#")
    }
    lowest = {
        ln.split("==")[0].lower(): ln.split("==")[1]
        for ln in (ROOT / "constraints-lowest.txt").read_text(encoding="utf-8").splitlines()
        if "==" in ln and not ln.startswith("#")
    }
    assert set(EXTRA_SDKS) == {"aws", "gcp", "azure"}, "every cloud's SDKs are its extra"
    for cloud, sdk in EXTRA_SDKS.items():
        assert sdk.extra == cloud
        reqs = {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"][sdk.extra]}
        assert set(reqs) == set(sdk.distributions)
        for module, dist in zip(sdk.modules, sdk.distributions, strict=True):
            assert dist not in core, f"{dist} is in the core install"
            assert module == dist.replace("-", "_")
            (floor,) = [s.version for s in reqs[dist].specifier if s.operator == ">="]
            assert lowest[dist] == floor
            assert pins[dist] in reqs[dist].specifier
        dev = [Requirement(r) for r in project["optional-dependencies"]["dev"] if r.startswith("gpu-cluster")]
        assert sdk.extra in dev[0].extras, "the tests install it"
        assert (ROOT / "components" / cloud).is_dir()
