"""compare one run at a time: the spooled compare.json is the in-memory document, and the
summary form of provenance is schema-valid and counts what the full form holds."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_compare_units import five_runs

from otel_bridge.compare import (
    Comparison,
    ProvenanceSpool,
    compare,
    provenance_summary,
    render_markdown,
    validate_document,
    validate_provenance,
)
from otel_bridge.errors import DecodeError


def spooled(tmp_path: Path, mode: str) -> tuple[dict[str, Any], list[Path]]:
    """compare.json as the command writes it (runs added one by one, provenance spooled)."""
    with ProvenanceSpool(tmp_path) as spool:
        spools = [spool.path]

        def sink(run_id: str, provenance: dict[str, Any]) -> None:
            validate_provenance(run_id, provenance)
            spool.add(run_id, provenance)

        with Comparison(None, sink, mode, tmp_path) as comparison:
            for run in five_runs():
                comparison.add(run)
            spool.write_document(comparison.finish(), tmp_path / "compare.json")
    doc: dict[str, Any] = orjson.loads((tmp_path / "compare.json").read_bytes())
    return doc, spools


def test_the_spooled_document_is_the_in_memory_document(tmp_path: Path) -> None:
    doc, spools = spooled(tmp_path, "full")
    assert doc == orjson.loads(orjson.dumps(compare(five_runs())))
    validate_document(doc)
    assert stat.S_IMODE((tmp_path / "compare.json").stat().st_mode) == 0o600
    assert not any(p.exists() for p in spools)  # the spool is removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.json"]


def test_summary_provenance_counts_the_full_graphs(tmp_path: Path) -> None:
    doc, _ = spooled(tmp_path, "summary")
    full = compare(five_runs())
    validate_document(doc)
    for run_id, prov in full["provenance"].items():
        counts = doc["provenance"][run_id]["counts"]
        assert counts["activities"] == len(prov["activities"])
        assert counts["entities"] == len(prov["entities"])
        assert sum(counts["edges"].values()) == len(prov["edges"])
        assert counts["edges"].get("observed_dataflow", 0) == sum(
            1 for e in prov["edges"] if e["method"] == "observed_dataflow"
        )
    assert {k: v for k, v in doc.items() if k != "provenance"} == {
        k: v for k, v in orjson.loads(orjson.dumps(full)).items() if k != "provenance"
    }
    # compare.md reads the counts the same way as the full graphs
    assert render_markdown(doc) == render_markdown(full)


def test_a_broken_provenance_member_is_refused() -> None:
    prov = provenance_summary({"activities": [], "entities": [], "edges": []})
    validate_provenance("r", prov)
    with pytest.raises(DecodeError, match="provenance/r"):
        validate_provenance("r", {"counts": {"activities": -1, "entities": 0, "edges": {}}})
    with pytest.raises(DecodeError, match="provenance/r"):
        validate_provenance("r", {"activities": []})


def test_runs_with_one_id_are_refused() -> None:
    runs = five_runs()
    with Comparison() as comparison:
        comparison.add(runs[0])
        with pytest.raises(DecodeError, match="same run id"):
            comparison.add(runs[0])
