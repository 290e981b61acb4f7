"""The standing fuzz suite, run long: inputs tried and failures per target.

Runs every property of ``tests/fuzz/fuzz_targets.py`` (OS-sourced strings, the config loader,
OTLP/JSON and OTLP/protobuf decoding, and the real HTTP and gRPC receivers) for ``--examples``
generated inputs each, and prints one line per target: inputs tried, failures, seconds. A
failing target also prints its minimal falsifying input. Exits 1 when any target failed.

    python benchmarks/fuzz.py                      # 2000 inputs per target
    python benchmarks/fuzz.py --examples 500 --targets config otlp_json
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fuzz"))

import hypothesis.strategies as st
from fuzz_targets import (
    TARGETS,
    check_http,
    grpc_caller,
    otlp_json_body,
    otlp_proto_body,
    running_receiver,
)
from hypothesis import HealthCheck, Phase, given, settings

_ALL = (*sorted(TARGETS), "http", "grpc")


def run_target(
    strategy: st.SearchStrategy[Any], check: Callable[[Any], None], examples: int
) -> tuple[int, str]:
    """Run ``check`` over ``examples`` inputs; (inputs tried, failure text or "")."""
    tried = 0

    def counted(value: Any) -> None:
        nonlocal tried
        tried += 1
        check(value)

    test = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )(given(strategy)(counted))
    try:
        test()
    except Exception:
        return tried, traceback.format_exc(limit=3)
    return tried, ""


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the targets, print the table; 1 when anything failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="inputs per target")
    parser.add_argument("--targets", nargs="+", choices=_ALL, default=list(_ALL))
    args = parser.parse_args(argv)
    logging.getLogger("otel_bridge").setLevel(logging.ERROR)  # rejections are the point here
    failed = 0
    print(f"{'target':<12} {'inputs':>8} {'failures':>9} {'seconds':>8}")
    with running_receiver() as servers:
        channel, call = grpc_caller(servers)

        def both(pair: tuple[bytes, bytes]) -> None:
            check_http(servers, pair[0], "application/json")
            check_http(servers, pair[1], "application/x-protobuf")

        targets: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
            **TARGETS,
            "http": (st.tuples(otlp_json_body, otlp_proto_body()), both),
            "grpc": (otlp_proto_body(), call),
        }
        for name in args.targets:
            strategy, check = targets[name]
            started = time.monotonic()
            tried, failure = run_target(strategy, check, args.examples)
            failures = 1 if failure else 0
            failed += failures
            print(f"{name:<12} {tried:>8} {failures:>9} {time.monotonic() - started:>8.1f}")
            if failure:
                print(failure, file=sys.stderr)
        channel.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
