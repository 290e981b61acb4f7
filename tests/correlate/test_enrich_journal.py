"""enrich's durable hold: what a kill -9 interrupts is replayed at the next start, at least once.

The first processor runs in a child process killed with SIGKILL (no shutdown, no flush), the
way a collector dies; the test then starts a new processor on the same journal.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from correlate_builders import MS, T0, Proc, declaration, exit_obs
from test_enrich import correlated, tool_span

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch
from otel_bridge.processors.enrich import Config, EnrichProcessor, factory
from otel_bridge.processors.enrich_journal import HoldJournal, JournalConfig, encode_batch
from otel_bridge.testing import RecordingConsumer

SPAN2 = "b2" * 8

CHILD = """
import sys
from otel_bridge.component import Telemetry
from otel_bridge.processors.enrich import Config, EnrichProcessor
from otel_bridge.processors.enrich_journal import HoldJournal, JournalConfig, decode_batch
from otel_bridge.component import Host
from otel_bridge.testing import RecordingConsumer

now = [100.0]
config = Config(hold_delay=5.0, tick_interval=3600.0, journal=JournalConfig(path=sys.argv[1]))
journal = HoldJournal(config.journal, "evidence.enrich", Telemetry())
proc = EnrichProcessor(config, RecordingConsumer(), Telemetry(), lambda: now[0], journal=journal)
proc.start(Host())
batches = [decode_batch(open(p, "rb").read()) for p in sys.argv[2:]]
proc.consume(batches[0])
now[0] = 200.0
proc.flush_due()  # the first span and the exited ls are forwarded: their batch is done
for batch in batches[1:]:
    proc.consume(batch)
print("consumed", flush=True)
sys.stdin.read()
"""


def _batches(tmp_path: Path) -> list[Path]:
    """Three journal payloads: a bridged span with its exited process; a still-running process;
    a second span. Written to files for the child."""
    ls = Proc(pid=100, exe="/usr/bin/ls", argv=("ls", "-la"), time=T0 + 100 * MS)
    sleeper = Proc(pid=101, exe="/usr/bin/sleep", argv=("sleep", "9"), time=T0 + 200 * MS)
    first = correlated(
        declaration("a1" * 8, "ls -la", T0, T0 + 500 * MS)
        + ls.observations()
        + [exit_obs(ls, T0 + 300 * MS, 0)]
    )
    payloads = [
        encode_batch((tool_span(),), tuple(first)),
        encode_batch((), tuple(sleeper.observations())),
        encode_batch((tool_span(SPAN2),), ()),
    ]
    paths = []
    for i, payload in enumerate(payloads):
        path = tmp_path / f"batch{i}"
        path.write_bytes(payload)
        paths.append(path)
    return paths


def _kill_after_consuming(journal: Path, batches: list[Path], later: float = 200.0) -> None:
    """Run CHILD on ``batches`` (the clock moved to ``later`` after the first), kill -9 it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    code = CHILD.replace("now[0] = 200.0", f"now[0] = {later}")
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(journal), *map(str, batches)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # the child closes stdout if it fails
    if line != b"consumed\n":
        child.kill()
        _, err = child.communicate()
        raise AssertionError(err.decode())
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL


def _restart(journal: Path) -> tuple[RecordingConsumer, Telemetry]:
    """A new processor on ``journal``, started (replaying) and shut down."""
    sink = RecordingConsumer()
    telemetry = Telemetry()
    config = Config(hold_delay=3600.0, tick_interval=3600.0, journal=JournalConfig(str(journal)))
    comp = factory.create(
        CreateSettings(id="enrich", pipeline="evidence", telemetry=telemetry), config, sink
    )
    comp.start(Host(telemetry=telemetry))
    comp.shutdown()
    return sink, telemetry


def _replayed(telemetry: Telemetry, name: str) -> int:
    return telemetry.total(f"journal.replayed_{name}", kind="processor")


def test_kill9_replays_what_was_not_forwarded(tmp_path: Path) -> None:
    """After kill -9, exactly the batches whose output was not forwarded are replayed: the held
    second span and the running process; the first span, forwarded before the kill, is not."""
    journal = tmp_path / "journal"
    _kill_after_consuming(journal, _batches(tmp_path))
    sink, telemetry = _restart(journal)
    assert _replayed(telemetry, "batches") == 2
    assert _replayed(telemetry, "spans") == 1
    names = {(s.span_id.hex(), s.name) for s in sink.spans}
    assert (SPAN2, "execute_tool shell") in names
    assert all(span_id != "a1" * 8 for span_id, _ in names)
    sleeper = [s for s in sink.spans if s.attributes.get("process.pid") == 101]
    assert len(sleeper) == 1
    assert sleeper[0].attributes["otel_bridge.process.exit_observed"] is False
    # the directory and files are owner-only
    for path in [journal, *journal.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    # a clean shutdown forwarded everything: the next start replays nothing
    _, again = _restart(journal)
    assert _replayed(again, "batches") == 0


def test_bridge_replayed_with_its_span(tmp_path: Path) -> None:
    """A held span and its bridge, both replayed, come out enriched as before the kill."""
    journal = tmp_path / "journal"
    paths = _batches(tmp_path)
    # only the first batch (span + bridge + ls), still held at the kill
    _kill_after_consuming(journal, paths[:1], later=101.0)
    sink, telemetry = _restart(journal)
    assert _replayed(telemetry, "spans") == 1
    (tool,) = [s for s in sink.spans if s.span_id.hex() == "a1" * 8]
    assert tool.attributes["otel_bridge.bridge.process.pid"] == 100
    assert [link.span_id for link in tool.links]


def test_full_journal_refuses(tmp_path: Path) -> None:
    """A batch that does not fit is refused (retry later), counted, and nothing is held."""
    telemetry = Telemetry()
    config = Config(journal=JournalConfig(str(tmp_path / "j"), max_bytes=64))
    comp = factory.create(
        CreateSettings(id="enrich", telemetry=telemetry), config, RecordingConsumer()
    )
    assert isinstance(comp, EnrichProcessor)
    comp.start(Host(telemetry=telemetry))
    try:
        with pytest.raises(RefusedError):
            comp.consume(Batch(spans=(tool_span(),)))
        assert telemetry.total("journal.refused", kind="processor") == 1
    finally:
        comp.shutdown()


def test_symlinked_journal_directory_refused(tmp_path: Path) -> None:
    """A symlink planted as the journal's directory is not followed: the start fails."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "processor_enrich").symlink_to(target)
    journal = HoldJournal(JournalConfig(str(tmp_path / "j")), "enrich", Telemetry())
    with pytest.raises(Exception, match="processor_enrich"):
        journal.open()
    assert not list(target.iterdir())


def test_batches_after_shutdown_pass_through(tmp_path: Path) -> None:
    """After shutdown (an upstream processor flushing into enrich) a batch is forwarded at once,
    not refused because the journal is closed."""
    sink = RecordingConsumer()
    config = Config(journal=JournalConfig(str(tmp_path / "j")))
    comp = factory.create(CreateSettings(id="enrich"), config, sink)
    assert isinstance(comp, EnrichProcessor)
    comp.start(Host())
    comp.shutdown()
    comp.consume(Batch(spans=(tool_span(),)))
    assert [s.name for s in sink.spans] == ["execute_tool shell"]
