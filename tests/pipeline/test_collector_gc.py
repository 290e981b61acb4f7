"""The garbage-collector setting of a process that runs a collector
(``otel_bridge.gcpause.set_for_collector``): the console commands that run one set it, a
library caller's process and the other commands keep Python's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from otel_bridge.gcpause import COLLECTOR_GEN0_THRESHOLD

_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("GC", *gc.get_threshold(), gc.get_freeze_count(), file=sys.stderr))
from otel_bridge.cli import main
{call}
"""


def _settings(call: str, argv: list[str]) -> tuple[list[int], int]:
    """(thresholds, frozen objects) of a fresh interpreter at exit, after ``call``."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(call=call), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line.split() for line in proc.stderr.splitlines() if line.startswith("GC ")]
    assert lines, proc.stderr
    numbers = [int(x) for x in lines[-1][1:]]
    return numbers[:3], numbers[3]


def test_console_run_sets_the_collector_gc_before_anything_else(tmp_path: Path) -> None:
    """``otel-bridge run`` as a console process (``main()`` reading ``sys.argv``) raises the
    young generation's threshold and freezes its start-up objects; the missing configuration
    it then refuses shows the setting comes before any collector is built."""
    missing = str(tmp_path / "missing.yaml")
    _, default_middle, default_old = _settings("pass", [])[0]  # Python's own, in a fresh process
    thresholds, frozen = _settings("sys.exit(main())", ["run", "-c", missing])
    assert thresholds == [COLLECTOR_GEN0_THRESHOLD, default_middle, default_old]
    assert frozen > 1000  # modules, classes and functions imported by the command line


def test_library_callers_and_other_commands_keep_pythons_settings(tmp_path: Path) -> None:
    """A program that calls ``main(argv)`` owns its process: nothing is changed. Nor does a
    console command that runs no collector (``validate``) change anything."""
    missing = str(tmp_path / "missing.yaml")
    default = list(_settings("pass", [])[0])
    assert default[0] < COLLECTOR_GEN0_THRESHOLD
    as_library = f"sys.exit(main(['run', '-c', {missing!r}]))"
    assert _settings(as_library, []) == (default, 0)
    assert _settings("sys.exit(main())", ["validate", "-c", missing]) == (default, 0)
