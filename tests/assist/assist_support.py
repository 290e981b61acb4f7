"""Shared names of the assist tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Serve = Callable[[str], str]
"""The ``model_server`` fixture: start a scripted server answering with a text; its base URL."""


def answer(value: Any) -> str:
    """A model answer holding ``value`` as JSON."""
    return json.dumps(value)
