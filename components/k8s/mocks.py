"""Offline answers for the in-cluster add-ons (see components/engine.py).

The add-ons make no invokes: pulumi-kubernetes reads nothing from a cluster while a
program is built, and ``helm.v4.Chart`` reaches the mock monitor as one remote component.
The tables exist so that an add-on that starts calling a function fails loudly in the
offline engine until its answer is declared here.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

INVOKES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {}
COMPUTED: dict[str, Callable[[str, Mapping[str, Any]], dict[str, Any]]] = {}
