"""The review's write path at scale: the compiled schema check and the streamed record index.

``schemas.check`` answers a valid document with ``jsonschema-rs`` and leaves every refusal (and
every message) to ``jsonschema``; ``review-records.jsonl`` is encoded in blocks. Both must keep
the verdicts, the messages and the bytes of the plain ``jsonschema`` / ``orjson`` path.
"""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from review_support import RunBuilder, Session

from otel_bridge import schemas
from otel_bridge.errors import DecodeError
from otel_bridge.review import build_review, write_review
from otel_bridge.review.build import RECORD_BLOCK, record_lines

TRACE = "cd" * 16
SESSION = Session(
    trace=TRACE,
    task="Patch mod.py, then test it.",
    answer="I patched mod.py and `pytest -q` passes.",
    commands=[
        (["tee", "mod.py"], 0, [], ["/w/mod.py"]),
        (["pytest", "-q"], 1, ["/w/mod.py"], []),
    ],
)


@pytest.fixture(scope="module")
def review_doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    builder = RunBuilder()
    builder.add(SESSION, first_span=1000)
    run_dir = builder.write(tmp_path_factory.mktemp("run") / "run", extra_line='{"not": "otlp"}')
    doc, _records = build_review(str(run_dir))
    return doc


def _reference_errors(name: str, doc: Any) -> list[str]:
    """The places ``jsonschema`` alone finds, as ``check`` words them."""
    validators = pytest.importorskip("jsonschema.validators")
    schema = schemas.load(name)
    found = validators.validator_for(schema)(schema).iter_errors(doc)
    return sorted(
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in found
    )


def _broken(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Documents each breaking the review schema in one way (or, for ``newline``, passing
    ``jsonschema``'s Python ``$`` while a strict end-of-text ``$`` would refuse them)."""

    def edit(change: Any) -> dict[str, Any]:
        out = copy.deepcopy(doc)
        change(out)
        return out

    return {
        "missing": edit(lambda d: d.pop("claims")),
        "extra": edit(lambda d: d.update(surprise=1)),
        "type": edit(lambda d: d["claims"][0].update(time="noon")),
        "bool_for_int": edit(lambda d: d["claims"][0].update(time=True)),
        "enum": edit(lambda d: d["claims"][0].update(status="maybe")),
        "empty_mentions": edit(lambda d: d["claims"][0].update(mentions=[])),
        "pattern": edit(lambda d: d["edges"][0].update(id="r-XYZ")),
        "newline": edit(lambda d: d["edges"][0].update(id=d["edges"][0]["id"] + "\n")),
        "many": edit(lambda d: [e.update(id=7) for e in d["edges"]]),
    }


def test_a_real_review_passes_the_fast_and_the_reference_validator(
    review_doc: dict[str, Any],
) -> None:
    pytest.importorskip("jsonschema_rs", reason="jsonschema-rs (a base dependency) not installed")
    fast = schemas.fast_validator("review")
    assert fast is not None
    assert review_doc["claims"], "the fixture has a claim to break below"
    assert len(review_doc["edges"]) > 5, "and more edges than check() shows"
    assert fast(review_doc)
    assert _reference_errors("review", review_doc) == []
    schemas.check("review", review_doc)


def test_the_fast_validator_never_passes_what_jsonschema_refuses(
    review_doc: dict[str, Any],
) -> None:
    pytest.importorskip("jsonschema_rs", reason="jsonschema-rs (a base dependency) not installed")
    fast = schemas.fast_validator("review")
    assert fast is not None
    for name, doc in _broken(review_doc).items():
        reference = _reference_errors("review", doc)
        if reference:
            assert not fast(doc), name
        else:  # the fast validator may refuse more; check() then defers to jsonschema
            schemas.check("review", doc)


@pytest.mark.parametrize("compiled", [True, False], ids=["jsonschema-rs", "fallback"])
def test_messages_are_jsonschema_s_with_key_paths(
    review_doc: dict[str, Any], compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled:
        pytest.importorskip("jsonschema_rs", reason="jsonschema-rs not installed")
    else:  # as without the package: importing it raises ImportError
        monkeypatch.setitem(__import__("sys").modules, "jsonschema_rs", None)
    schemas.fast_validator.cache_clear()
    try:
        assert (schemas.fast_validator("review") is None) is not compiled
        for name, doc in _broken(review_doc).items():
            reference = _reference_errors("review", doc)
            if not reference:
                schemas.check("review", doc)
                continue
            with pytest.raises(DecodeError) as raised:
                schemas.check("review", doc)
            text = str(raised.value)
            assert text.startswith("review.json does not match its schema: "), name
            assert reference[0] in text, name
            assert ("more)" in text) is (len(reference) > 5), name
    finally:
        schemas.fast_validator.cache_clear()


def test_record_lines_are_orjson_s_bytes_across_blocks() -> None:
    records: list[dict[str, Any]] = [
        {
            "type": "os_event",
            "id": f"os.jsonl:{i}",
            "source": {"line": i, "file": "os.jsonl", "trace_id": None, "span_id": "é\u2028✓"},
            "time": i * 1_000_000_007 if i % 3 else None,
            "name": 'q"uote\\back\nline',
        }
        for i in range(RECORD_BLOCK + 3)
    ]
    blocks = list(record_lines(records))
    assert len(blocks) == 2
    expected = b"".join(
        orjson.dumps(r, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE) for r in records
    )
    assert b"".join(blocks) == expected
    assert list(record_lines([])) == []


def test_written_index_is_private_and_one_line_per_record(tmp_path: Path) -> None:
    builder = RunBuilder()
    builder.add(SESSION, first_span=1000)
    run_dir = builder.write(tmp_path / "run")
    _doc, records = build_review(str(run_dir))
    write_review(str(run_dir), str(tmp_path / "out"))
    index = tmp_path / "out" / "review-records.jsonl"
    assert stat.S_IMODE(index.stat().st_mode) == 0o600
    lines = index.read_bytes().splitlines()
    assert [json.loads(line) for line in lines] == records
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".tmp-")]
