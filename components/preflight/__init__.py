"""The online preflight: what only the account can answer, asked before ``pulumi up``.

The offline plan proves that the program runs and the spec that every value is one the cloud
accepts in general; neither knows this account. The preflight asks the cloud's own API, with
the deployer's credentials, the questions a first ``pulumi up`` would otherwise answer by
failing half-way: is the type offered in this zone, does the reservation exist and fit, do the
quotas cover the node count, is the data bucket there, is the deployer inside the ranges the
API will admit.

Each check reports ``(config path, reason)`` problems in the spec's style, or says it could not
check (and why); ``run`` prints progress per check on stderr and returns the exit code:
:data:`OK` 0, :data:`PROBLEMS` 2 (any problem found), :data:`UNCHECKED` 3 (no problem found but
something could not be checked: no credentials, an endpoint that does not answer, a permission
the caller lacks). Pure of Pulumi: it reads the stack file through ``gpu_cluster.components.spec``.
"""

from __future__ import annotations

import ipaddress
import sys
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TextIO

# A Problem is something the cloud would refuse or that would break the cluster, at a config
# path: the project's one problem type (components/problems.py).
from gpu_cluster.components.problems import Problem as Problem
from gpu_cluster.components.spec import DEPLOYER_PLACEHOLDER, MY_ADDRESS_HINT, ClusterSpec, needs_deployer_placeholder

OK = 0
PROBLEMS = 2
UNCHECKED = 3


# The reason of a check that a Fatal earlier in the run kept from running.
NOT_RUN = "not run: "


class CouldNotCheck(Exception):
    """A check that could not reach an answer; the message says why (and what to do)."""


class NotApplicable(Exception):
    """The check does not apply to this stack; the message says why (shown in the progress)."""


class Fatal(CouldNotCheck):
    """Nothing further can be checked: no credentials, or the endpoint does not answer."""


@dataclass(slots=True)
class Context:
    """What every check of one run shares: the spec, the raw stack object, the cloud clients
    and a cache for answers two checks need (one API call, two verdicts)."""

    spec: ClusterSpec
    raw: Mapping[str, Any]
    clients: Any
    cache: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """Facts worth showing that are not problems (when a capacity block starts, for example)."""

    def cached(self, key: str, fetch: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = fetch()
        return self.cache[key]


CheckFn = Callable[[Context], list[Problem]]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    """What the progress line says is being checked."""
    run: CheckFn


@dataclass(slots=True)
class Result:
    problems: list[Problem] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)
    """(check name, why it could not be checked)."""
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return PROBLEMS
        return UNCHECKED if self.unchecked else OK


def run_checks(ctx: Context, checks: Sequence[Check], progress: TextIO | None = None) -> Result:
    """Run every check, each on its own: a problem or a failure of one never hides the others.
    A :class:`Fatal` (no credentials, endpoint down) stops the run: every further call would
    fail the same way."""
    err = progress if progress is not None else sys.stderr
    result = Result()
    for i, check in enumerate(checks, 1):
        print(f"preflight [{i}/{len(checks)}] {check.name} ...", end=" ", file=err, flush=True)
        try:
            found = check.run(ctx)
        except NotApplicable as exc:
            print(f"not applicable ({exc})", file=err)
            continue
        except Fatal as exc:
            print("could not check", file=err)
            result.unchecked.append((check.name, str(exc)))
            for rest in checks[i:]:
                result.unchecked.append((rest.name, NOT_RUN + str(exc).split(";")[0]))
            break
        except CouldNotCheck as exc:
            print("could not check", file=err)
            result.unchecked.append((check.name, str(exc)))
            continue
        except Exception as exc:  # an API answer no check foresaw: say so, keep checking the rest
            print("could not check", file=err)
            result.unchecked.append(
                (check.name, f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            )
            continue
        print("ok" if not found else f"{len(found)} problem(s)", file=err)
        result.problems += found
    result.notes = list(ctx.notes)
    return result


def render(result: Result, out: TextIO) -> None:
    """``config path: reason``, one a line, all at once; then what could not be checked."""
    for p in result.problems:
        print(p.render(), file=out)
    # The checks a Fatal stopped share its reason: it is said once, on the check that met it,
    # and the rest are named on one line that points at that check (not the same sentence again).
    not_run: dict[str, list[str]] = {}
    met: dict[str, str] = {}  # a reason said in full -> the check that met it
    for name, why in result.unchecked:
        if why.startswith(NOT_RUN):
            not_run.setdefault(why.removeprefix(NOT_RUN), []).append(name)
        else:
            print(f"could not check {name}: {why}", file=out)
            met.setdefault(why, name)
    for why, names in not_run.items():
        by = next((name for full, name in met.items() if full.startswith(why)), None)
        same = f"as {by}" if by is not None else f"({why})"
        print(f"not checked, for the same reason {same}: {', '.join(names)}", file=out)
    for note in result.notes:
        print(f"note: {note}", file=out)


# ---------------------------------------------------------------------------------------------
# Checks both clouds share


# Where the deployer's own address is asked (any "what is my IP" service answers the same).
CHECKIP_URL = "https://checkip.amazonaws.com"


def deployer_ranges(ctx: Context, checkip_url: str | None = CHECKIP_URL, timeout: float = 5.0) -> list[Problem]:
    """A public Kubernetes endpoint admits only ``deployer_cidrs``: they must be set, and the
    address this machine leaves from must be inside them, or ``pulumi up`` cannot deploy the
    in-cluster layer (and hangs on it). ``checkip_url=None`` skips the address lookup."""
    spec, orch = ctx.spec, ctx.spec.orchestration
    if not orch.in_cluster:
        raise NotApplicable("slurm" if orch.kind == "slurm" else "private endpoint")
    if needs_deployer_placeholder(ctx.raw) or orch.deployer_cidrs == (DEPLOYER_PLACEHOLDER,):
        return [
            Problem(
                "orchestration.deployer_cidrs",
                f"required for {orch.kind} with a public endpoint: the API admits only these ranges and "
                f"`pulumi up` deploys the in-cluster layer through it (allowed: {MY_ADDRESS_HINT}; or "
                "orchestration.endpoint: private)",
            )
        ]
    if checkip_url is None:
        return []
    try:
        with urllib.request.urlopen(checkip_url, timeout=timeout) as resp:  # noqa: S310 (fixed https URL)
            text = resp.read(64).decode("ascii", "replace").strip()
        me = ipaddress.ip_address(text)
    except (OSError, ValueError) as exc:
        raise CouldNotCheck(
            f"this machine's public address ({checkip_url} did not answer: {exc}); "
            f"the ranges are set: {', '.join(orch.deployer_cidrs)}"
        ) from None
    if any(me in ipaddress.ip_network(c) for c in orch.deployer_cidrs):
        return []
    return [
        Problem(
            "orchestration.deployer_cidrs",
            f"this machine leaves from {me}, which is in none of {', '.join(orch.deployer_cidrs)}; the "
            f"{spec.cloud} API endpoint would refuse `pulumi up` from here (allowed: add {me}/32, or run "
            "from inside a listed range)",
        )
    ]
