"""What a :class:`~.report.Comparison` keeps of the runs it has compared, in a few bytes per call.

Per call: the number of its capsule in a :class:`~.joined.CapsuleTable` (a 4-byte array item)
and the offset of its id in a private, already-unlinked temporary file (an 8-byte array item);
the ids themselves are on disk, JSON-encoded. Per run: its id, path and metrics, how many calls
of each tool it made, where its calls start. Per distinct (producer capsule, consumer capsule,
method) of a confirmed dependency: the runs that have it (one array item per run).

The joined graph's per-call and per-run lists (each node's ``members`` and ``multiplicity``,
each edge's ``runs``) are :class:`Streamed` values: :func:`~.output.write_document` encodes
them into ``compare.json`` piece by piece from these arrays and the id file, byte for byte as
``orjson`` encodes the materialised list (``OPT_SORT_KEYS | OPT_INDENT_2``), and
:func:`materialized` turns them into plain lists and dicts for the in-memory document.
"""

from __future__ import annotations

import mmap
import tempfile
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CHUNK = 4096
"""Items encoded per piece written."""
RELEASE = 1024
"""Members encoded between two releases of the id file's pages (at most this many pages of it
are resident at once)."""


Capsule = tuple[frozenset[str], ...]
"""A call's four feature sets (tool, io, context, lineage: see :mod:`.joined`)."""


@dataclass(slots=True)
class CapsuleTable:
    """The distinct capsules of every run's calls, each held once with what the joined graph
    needs of its calls: how many there are, the smallest call index among them, and the tool
    name and key of the first one (in run order, then call order)."""

    capsules: list[Capsule] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    first_index: list[int] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    _index: dict[Capsule, int] = field(default_factory=dict)
    _sets: dict[frozenset[str], frozenset[str]] = field(default_factory=dict)
    _strings: dict[str, str] = field(default_factory=dict)

    def _shared(self, capsule: Capsule) -> Capsule:
        """``capsule`` built from feature strings and sets already held, where equal ones are
        (distinct capsules of one task share most of their features)."""
        out = []
        for features in capsule:
            held = self._sets.get(features)
            if held is None:
                strings = self._strings
                held = frozenset(strings.setdefault(f, f) for f in features)
                self._sets[held] = held
            out.append(held)
        return tuple(out)

    def add(self, capsule: Capsule, index: int, tool: str, key: str) -> int:
        """Count one call (its index in its run, tool and key) of ``capsule``; its number."""
        n = self._index.get(capsule)
        if n is None:
            capsule = self._shared(capsule)
            n = self._index[capsule] = len(self.capsules)
            self.capsules.append(capsule)
            self.counts.append(1)
            self.first_index.append(index)
            self.tools.append(tool)
            self.keys.append(key)
            return n
        self.counts[n] += 1
        self.first_index[n] = min(self.first_index[n], index)
        return n


class CompactCalls:
    """Every compared run's calls as capsule numbers, call-id offsets and dependency links."""

    def __init__(self, directory: Path | None = None) -> None:
        self.table = CapsuleTable()
        self.capsule = array("I")
        self.starts = array("Q", [0])
        self.run_ids: list[str] = []
        self.encoded_ids: list[bytes] = []
        self.paths: list[str] = []
        self.metrics: list[dict[str, Any]] = []
        self.tools: list[dict[str, int]] = []
        self.links: dict[tuple[int, int, str], array[int]] = {}
        self._offsets = array("Q", [0])
        self._file = tempfile.TemporaryFile(prefix=".calls-", dir=directory)  # noqa: SIM115
        self._map: mmap.mmap | None = None
        self._rank: list[int] | None = None

    def add_run(
        self,
        run_id: str,
        path: str,
        metrics: dict[str, Any],
        calls: Iterable[tuple[Capsule, str, str, str]],
        confirmed: Iterable[tuple[int, int, str]],
    ) -> None:
        """One run: its calls (capsule, tool, key, call id) in order, confirmed dependencies
        (producer index, consumer index, method)."""
        r = len(self.run_ids)
        self.run_ids.append(run_id)
        self.encoded_ids.append(bytes(memoryview(orjson.dumps(run_id))))  # an exact-size copy
        self.paths.append(path)
        self.metrics.append(metrics)
        first = len(self.capsule)
        tools: dict[str, int] = {}
        encoded: list[bytes] = []
        for i, (capsule, tool, key, call_id) in enumerate(calls):
            self.capsule.append(self.table.add(capsule, i, tool, key))
            tools[tool] = tools.get(tool, 0) + 1
            encoded.append(orjson.dumps(call_id))
            self._offsets.append(self._offsets[-1] + len(encoded[-1]))
        self._file.write(b"".join(encoded))
        self.tools.append(tools)
        self.starts.append(len(self.capsule))
        for producer, consumer, method in confirmed:
            key3 = (self.capsule[first + producer], self.capsule[first + consumer], method)
            runs = self.links.setdefault(key3, array("I"))
            if not runs or runs[-1] != r:
                runs.append(r)

    def call_id(self, position: int) -> bytes:
        """The JSON-encoded id of the call at ``position`` (over all runs, in order)."""
        if self._map is None:
            self._file.flush()
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map[self._offsets[position] : self._offsets[position + 1]]

    def release(self) -> None:
        """Let the kernel drop the id file's pages read so far from this process's resident
        set (they stay in the page cache; reading them again is a minor fault)."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def run_of(self, position: int) -> int:
        """The run the call at ``position`` belongs to."""
        return bisect_right(self.starts, position) - 1

    def rank(self) -> list[int]:
        """Run number -> its place among the run ids in sorted order (JSON key order)."""
        if self._rank is None:
            order = sorted(range(len(self.run_ids)), key=self.run_ids.__getitem__)
            self._rank = [0] * len(order)
            for place, r in enumerate(order):
                self._rank[r] = place
        return self._rank

    def placement(
        self, where: Sequence[int], size: int
    ) -> tuple[list[tuple[array[int], array[int]]], list[array[int]]]:
        """For each of ``size`` joined nodes (``where``: capsule -> node): the runs that have
        it with their call counts, and the positions of its calls in order."""
        runs: list[tuple[array[int], array[int]]] = [(array("I"), array("I")) for _ in range(size)]
        positions: list[array[int]] = [array("I") for _ in range(size)]
        capsule = self.capsule
        for r in range(len(self.run_ids)):
            for pos in range(self.starts[r], self.starts[r + 1]):
                node = where[capsule[pos]]
                positions[node].append(pos)
                ids, counts = runs[node]
                if ids and ids[-1] == r:
                    counts[-1] += 1
                else:
                    ids.append(r)
                    counts.append(1)
        return runs, positions

    def close(self) -> None:
        """Drop the id file (it was never linked into a directory)."""
        if self._map is not None:
            self._map.close()
            self._map = None
        self._file.close()


class Streamed:
    """A JSON array or object of ``compare.json`` held compactly and encoded on demand."""

    opening, closing = b"[", b"]"

    def items_encoded(self, indent: int) -> Iterator[bytes]:
        """Each item encoded on a line indented by ``indent`` spaces, in output order."""
        raise NotImplementedError

    def value(self, limit: int | None = None) -> Any:
        """The materialised list or dict (its first ``limit`` items)."""
        raise NotImplementedError

    def encoded(self, indent: int) -> Iterator[bytes]:
        """Pieces of the value encoded as ``orjson`` with ``OPT_INDENT_2`` writes it on a line
        indented by ``indent`` spaces."""
        inner = b"\n" + b" " * (indent + 2)
        sep = b"," + inner
        pieces: list[bytes] = []
        first = True
        for item in self.items_encoded(indent + 2):
            pieces.append(item)
            if len(pieces) == CHUNK:
                yield (self.opening + inner if first else sep) + sep.join(pieces)
                first, pieces = False, []
        if first and not pieces:
            yield self.opening + self.closing
            return
        if pieces:
            yield (self.opening + inner if first else sep) + sep.join(pieces)
        yield b"\n" + b" " * indent + self.closing


class Members(Streamed):
    """A joined node's ``members``: ``{"activity", "run"}`` per call, in run and call order."""

    def __init__(self, calls: CompactCalls, positions: array[int]) -> None:
        self.calls, self.positions = calls, positions

    def items_encoded(self, indent: int) -> Iterator[bytes]:
        calls = self.calls
        inner = b"\n" + b" " * (indent + 2)
        close = b"\n" + b" " * indent + b"}"
        for n, pos in enumerate(self.positions, 1):
            if n % RELEASE == 0:
                calls.release()
            run = calls.encoded_ids[calls.run_of(pos)]
            yield (
                b"{"
                + inner
                + b'"activity": '
                + calls.call_id(pos)
                + b","
                + inner
                + (b'"run": ' + run + close)
            )

    def value(self, limit: int | None = None) -> list[dict[str, str]]:
        calls = self.calls
        return [
            {"run": calls.run_ids[calls.run_of(p)], "activity": orjson.loads(calls.call_id(p))}
            for p in self.positions[:limit]
        ]


class Multiplicity(Streamed):
    """A joined node's ``multiplicity``: run id -> how many of its calls the node holds."""

    opening, closing = b"{", b"}"

    def __init__(self, calls: CompactCalls, runs: array[int], counts: array[int]) -> None:
        self.calls, self.runs, self.counts = calls, runs, counts

    def _sorted(self) -> list[tuple[int, int]]:
        rank = self.calls.rank()
        return sorted(zip(self.runs, self.counts, strict=True), key=lambda rc: rank[rc[0]])

    def items_encoded(self, indent: int) -> Iterator[bytes]:
        ids = self.calls.encoded_ids
        for r, n in self._sorted():
            yield ids[r] + b": " + str(n).encode()

    def value(self, limit: int | None = None) -> dict[str, int]:
        return {self.calls.run_ids[r]: n for r, n in self._sorted()[:limit]}


class RunIds(Streamed):
    """A joined edge's ``runs``: the ids of the runs that have it, sorted."""

    def __init__(self, calls: CompactCalls, runs: Iterable[int]) -> None:
        rank = calls.rank()
        self.calls, self.runs = calls, array("I", sorted(runs, key=rank.__getitem__))

    def items_encoded(self, indent: int) -> Iterator[bytes]:
        ids = self.calls.encoded_ids
        return (ids[r] for r in self.runs)

    def value(self, limit: int | None = None) -> list[str]:
        return [self.calls.run_ids[r] for r in self.runs[:limit]]


def materialized(value: Any) -> Any:
    """``value`` with every :class:`Streamed` in it replaced by its list or dict."""
    if isinstance(value, Streamed):
        return value.value()
    if isinstance(value, Mapping):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialized(v) for v in value]
    return value


def outline(value: Any) -> Any:
    """``value`` with every :class:`Streamed` cut to its first item, for schema validation
    (the items all come from one encoder, so the first shows their shape)."""
    if isinstance(value, Streamed):
        return value.value(1)
    if isinstance(value, Mapping):
        return {k: outline(v) for k, v in value.items()}
    if isinstance(value, list):
        return [outline(v) for v in value]
    return value
