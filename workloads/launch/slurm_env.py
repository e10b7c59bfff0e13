"""What a Slurm job does before its steps: unpack the code it carries, find an interpreter new enough
for the job's pins, and make the shared virtualenv once per cluster.
"""

from __future__ import annotations

import shlex

from gpu_cluster.components.contract import ClusterOutputs
from gpu_cluster.workloads.launch.bundle import JOB_REQUIREMENTS, Bundle


# Where the Slurm job keeps its interpreter when ``--python`` names none: a virtualenv on the
# shared file system, made once by the first job and reused; its name carries the pins, so a
# change of pins makes a new one instead of mixing versions.
VENV_DIR = "gpu-cluster"


def venv_path(outputs: ClusterOutputs) -> str:
    import hashlib

    tag = hashlib.sha256("\n".join(JOB_REQUIREMENTS).encode()).hexdigest()[:8]
    return f"{outputs.mount.mount_point.rstrip('/')}/{VENV_DIR}/venv-{tag}"


def unpack_lines(bundle: Bundle, dest: str) -> list[str]:
    q = shlex.quote
    text = bundle.base64  # a property that encodes the whole archive: once, not once per line
    return [
        f"# The job's code ({bundle.digest}), carried inline: nothing is copied by hand.",
        f"mkdir -p {q(dest)}",
        f"base64 -d > {q(dest + '/bundle.tar.gz')} <<'GPUC_BUNDLE'",
        *[text[i : i + 76] for i in range(0, len(text), 76)],
        "GPUC_BUNDLE",
        f"tar -xzf {q(dest + '/bundle.tar.gz')} -C {q(dest)}",
    ]


# The job's pins (torch 2.13, numpy 2.4) publish wheels for CPython 3.10 and newer only; the OS
# python3 of a node may be older (AL2023 keeps /usr/bin/python3 at 3.9 for the life of the
# release: AL2023 user guide, "Python in AL2023"). Tried in this order.
MIN_PYTHON = (3, 10)
PYTHON_CANDIDATES = ("python3.12", "python3.11", "python3.10", "python3")


def interpreter_lines(explicit: str | None) -> list[str]:
    """Bash that sets ``$gpuc_python`` to an interpreter >= MIN_PYTHON (``explicit``, else the
    first of PYTHON_CANDIDATES that is new enough) and otherwise stops the job (exit 3, could
    not run) with one line naming every interpreter it found and its version."""
    q = shlex.quote
    want = ".".join(map(str, MIN_PYTHON))
    check = f"import sys; sys.exit(0 if sys.version_info >= {MIN_PYTHON!r} else 1)"
    version = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
    names = [explicit] if explicit else list(PYTHON_CANDIDATES)
    where = f"--python {explicit}" if explicit else ", ".join(PYTHON_CANDIDATES)
    fix = (
        f"(allowed: an interpreter {want} or newer)"
        if explicit
        else f"(allowed: {want} or newer; install python3.12 or pass --python PATH)"
    )
    return [
        "# The interpreter the job runs on, checked before anything is installed with it.",
        'gpuc_python="" gpuc_found="" gpuc_ver=""',
        f"for gpuc_cand in {' '.join(q(n) for n in names)}; do",
        '  gpuc_path=$(command -v "$gpuc_cand" 2>/dev/null) || continue',
        f'  gpuc_ver=$("$gpuc_path" -c {q(version)} 2>/dev/null) || gpuc_ver="(it did not run)"',
        '  gpuc_found="${gpuc_found:+$gpuc_found, }$gpuc_path $gpuc_ver"',
        f'  if "$gpuc_path" -c {q(check)} 2>/dev/null; then gpuc_python=$gpuc_path; break; fi',
        "done",
        'if [ -z "$gpuc_python" ]; then',
        f'  echo "no interpreter >= {want} for the job: looked for {where}; found ${{gpuc_found:-none}} {fix}" >&2',
        "  exit 3",
        "fi",
        'echo "job interpreter: $gpuc_python $gpuc_ver"',
    ]


def interpreter_candidates(prologue: str) -> tuple[str, ...]:
    """The interpreters a batch script's :func:`interpreter_lines` tries, in order, read back from
    the script (what the liveness model checks against the nodes); () where it has none."""
    lines = prologue.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('gpuc_python=""') and i + 1 < len(lines):
            loop = lines[i + 1]
            if loop.startswith("for gpuc_cand in ") and loop.endswith("; do"):
                return tuple(shlex.split(loop[len("for gpuc_cand in ") : -len("; do")]))
    return ()


def venv_lines(venv: str) -> list[str]:
    """Create the shared virtualenv once (under a lock: two jobs may start together) with the
    interpreter :func:`interpreter_lines` chose; a marker written last tells a complete one
    from one a killed job left half-made."""
    q = shlex.quote
    reqs = " ".join(q(r) for r in JOB_REQUIREMENTS)
    return [
        f"venv={q(venv)}",
        'if [ ! -e "$venv/.complete" ]; then',
        '  mkdir -p "$(dirname "$venv")"',
        "  (",
        "    flock 9",
        '    if [ ! -e "$venv/.complete" ]; then',
        '      echo "creating the job interpreter $venv (once per cluster)"',
        '      rm -rf "$venv" && "$gpuc_python" -m venv "$venv"',
        f'      "$venv/bin/python" -m pip install -q {reqs}',
        '      touch "$venv/.complete"',
        "    fi",
        '  ) 9>"$venv.lock"',
        "fi",
    ]
