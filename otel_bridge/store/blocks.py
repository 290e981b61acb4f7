"""Reading stored raw records back: a row's own ``record`` (schema version 1) or its
``(block, pos)`` in ``ob_blocks`` (version 2, :func:`otel_bridge.store.codec.pack_block`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from otel_bridge.store import codec

if TYPE_CHECKING:
    import psycopg

RECORD_COLUMNS = "record, run_id, block, pos"
"""What a query selects for :meth:`Blocks.records` (in this order, at the end of its row)."""


class Blocks:
    """Resolves rows to their records, fetching and decompressing each block once (the
    ``limit`` most recently used blocks are kept: rows read in ingest order share blocks)."""

    def __init__(self, conn: psycopg.Connection[Any], *, limit: int = 256) -> None:
        self.conn = conn
        self.limit = limit
        self._cache: OrderedDict[tuple[str, int], list[bytes]] = OrderedDict()

    def _load(self, wanted: set[tuple[str, int]]) -> None:
        missing = [k for k in wanted if k not in self._cache]
        if not missing:
            return
        rows = self.conn.execute(
            "SELECT run_id, block, data FROM ob_blocks WHERE run_id = ANY(%s) AND block = ANY(%s)",
            (sorted({r for r, _ in missing}), sorted({b for _, b in missing})),
        ).fetchall()
        for run_id, block, data in rows:
            self._cache[(str(run_id), int(block))] = codec.unpack_block(bytes(data))
        for key in missing:
            if key not in self._cache:
                raise ValueError(f"stored block {key[1]} of run {key[0]} is missing")

    def records(self, rows: Iterable[tuple[Any, ...]]) -> list[tuple[bytes, bool]]:
        """The stored record of each row ending in ``record, run_id, block, pos``, and whether
        it came from a block (``otel_bridge.store.records``: the two forms differ)."""
        rows = list(rows)
        self._load({(str(r[-3]), int(r[-2])) for r in rows if r[-4] is None})
        out: list[tuple[bytes, bool]] = []
        for row in rows:
            record, run_id, block, pos = row[-4:]
            if record is not None:
                out.append((codec.unpack(bytes(record)), False))
                continue
            key = (str(run_id), int(block))
            out.append((self._cache[key][int(pos)], True))
            self._cache.move_to_end(key)
        while len(self._cache) > self.limit:
            self._cache.popitem(last=False)
        return out
