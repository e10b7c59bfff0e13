"""AWS rules on a whole, typed cluster description, each beside the page it follows.

``check(spec, raw)`` returns ``(config path, reason)`` problems, as ``components.spec`` reports
them; ``parse_spec`` calls it once the generic rules pass. Pure: no Pulumi, no network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from components.spec import ClusterSpec


def check(spec: ClusterSpec, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    return problems
