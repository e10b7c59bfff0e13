"""How the cluster description reports: ``SpecError`` and the reader that records problems.

The reader converts one raw field at a time (a mapping, a string, an integer) and, instead of
raising at the first bad value, records ``(config path, reason)`` on itself, the shared
:class:`gpu_cluster.components.problems.Problems`; ``parse_spec`` raises them together as one
``SpecError``. Pure: no Pulumi.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from gpu_cluster.components.problems import Problem, Problems, ProblemsError


class SpecError(ProblemsError):
    """Every problem found in a cluster description, each as (config path, reason)."""

    def __init__(self, problems: Sequence[tuple[str, str]]):
        super().__init__(f"{len(problems)} problem(s) in the cluster description:", problems)


def short(value: Any) -> str:
    """A value as it appears in a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader(Problems):
    """Typed readers over a raw mapping; ``bad`` records a problem (``Problems.add``)."""

    @property
    def problems(self) -> list[Problem]:
        return self.items

    def bad(self, path: str, reason: str) -> None:
        self.add(path, reason)

    def mapping(self, obj: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
        if obj is None:
            obj = {}
        if not isinstance(obj, Mapping):
            self.bad(path, f"expected a mapping, got {type(obj).__name__} {short(obj)}")
            return {}
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if key not in allowed:
                self.bad(f"{path}.{key}" if path else str(key), f"unknown key (allowed: {', '.join(allowed)})")
            else:
                out[key] = value
        for key in required:
            if key not in out or out[key] is None:
                self.bad(f"{path}.{key}" if path else key, "required")
        return out

    def string(
        self,
        obj: Mapping[str, Any],
        key: str,
        path: str,
        default: str | None = None,
        pattern: re.Pattern[str] | None = None,
        allowed: Sequence[str] | None = None,
        hint: str = "",
    ) -> str | None:
        full = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            return default
        value = obj[key]
        if not isinstance(value, str) or isinstance(value, bool):
            self.bad(full, f"expected a string, got {type(value).__name__} {short(value)}")
            return default
        if allowed is not None and value not in allowed:
            self.bad(full, f"{value!r} is not allowed (allowed: {', '.join(allowed)})")
            return default
        if pattern is not None and not pattern.match(value):
            self.bad(full, f"{value!r} is malformed (allowed: {hint or pattern.pattern})")
            return default
        return value

    def integer(self, obj: Mapping[str, Any], key: str, path: str, default: int | None, lo: int, hi: int) -> int | None:
        full = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            return default
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(full, f"expected an integer, got {type(value).__name__} {short(value)} (allowed: {lo}..{hi})")
            return default
        if not lo <= value <= hi:
            self.bad(full, f"{value} is out of range (allowed: {lo}..{hi})")
            return default
        return value
