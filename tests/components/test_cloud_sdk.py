"""Azure's SDK is the [azure] extra (issue 23 item 8): an AWS or GCP plan never imports it, and an
Azure stack planned or run without it stops with one line naming the package and the command that
installs it, no traceback.

The missing SDK is simulated in a process of its own (``sys.modules['pulumi_azure_native'] = None``:
the import system then answers as for a package that is not installed), never by uninstalling it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from components.cloud_sdk import EXTRA_SDKS

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
    """`pulumi up` runs components.program.build; what it raises is a pulumi.RunError (reported by
    Pulumi's host as one error line, no stack trace) carrying the same words."""
    proc = _python(
        _WITHOUT_AZURE + "import pulumi\n"
        "from components.engine import run_offline\n"
        "from components.cloud_sdk import MissingCloudSdk\n"
        "from components.spec import read_stack_file\n"
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
    assert EXTRA_SDKS, "Azure's SDK is an extra"
    for cloud, sdk in EXTRA_SDKS.items():
        assert sdk.distribution not in core, f"{sdk.distribution} is in the core install"
        (req,) = [Requirement(r) for r in project["optional-dependencies"][sdk.extra]]
        assert req.name == sdk.distribution and sdk.module == sdk.distribution.replace("-", "_")
        (floor,) = [s.version for s in req.specifier if s.operator == ">="]
        assert lowest[sdk.distribution] == floor
        assert pins[sdk.distribution] in req.specifier
        dev = [Requirement(r) for r in project["optional-dependencies"]["dev"] if r.startswith("gpu-cluster")]
        assert sdk.extra in dev[0].extras, "the tests install it"
        assert (ROOT / "components" / cloud).is_dir()
