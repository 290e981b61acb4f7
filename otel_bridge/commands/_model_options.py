"""The ``--model`` options ``review`` and ``compare`` share (model assistance, off by default)."""

from __future__ import annotations

import argparse


def add_model_options(parser: argparse.ArgumentParser, doc: str, url_help: str) -> None:
    """``--model URL``, ``--model-name``, ``--model-timeout`` in a group pointing at ``doc``."""
    g = parser.add_argument_group(f"model assistance (off by default; {doc})")
    g.add_argument("--model", metavar="URL", help=url_help)
    g.add_argument("--model-name", default="default", help="model name sent (default: default)")
    g.add_argument(
        "--model-timeout", type=float, default=60.0, help="seconds per request (default: 60)"
    )
