"""Two model calls that answer the same text are two messages (``docs/review.md``, the
``assistant_message`` row): a final answer that repeats an earlier, premature one word for word
is read at its own time, so the claim it makes is checked against the work done before it.

The session: the model first says "`pytest -q` passes." before running anything, then runs
``pytest -q`` (exit 0), then gives the same answer again; the agent span repeats it as its output,
and a later request's history sends both answers again. Before, every sighting merged into one
message at the earliest time, before the first action, and the review found no claim at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from review_support import RunBuilder, Session, _msg

from otel_bridge.review import build_review

TRACE = "44" * 16
ANSWER = "`pytest -q` passes."


def _run(tmp_path: Path) -> dict[str, Any]:
    builder = RunBuilder()
    task = _msg("user", "Run the tests.")
    early = [_msg("assistant", ANSWER)]
    # The premature answer: a model call before any action.
    builder.span(TRACE, 1200, "chat m", builder.chat_attrs([task], early), 1000)
    session = Session(
        trace=TRACE, task="Run the tests.", answer=ANSWER, commands=[(["pytest", "-q"], 0, [], [])]
    )
    builder.add(session, first_span=1000)
    # The agent span repeats the final answer; a later request sends the history again.
    root = next(i for i, s in enumerate(builder.spans) if s.name == "invoke_agent a")
    attrs = dict(builder.spans[root].attributes)
    attrs["gen_ai.output.messages"] = json.dumps([_msg("assistant", ANSWER)])
    history = [task, *early, _msg("assistant", ANSWER)]
    builder.span(TRACE, 1300, "chat m", builder.chat_attrs(history, []), 1000)
    end = max(s.end_time_unix_nano for s in builder.spans) + 1  # the agent span encloses all
    builder.spans[root] = msgspec.structs.replace(
        builder.spans[root], attributes=attrs, end_time_unix_nano=end
    )
    run = builder.write(tmp_path / "run")
    return build_review(str(run))[0]


def test_a_repeated_final_answer_is_its_own_message_and_its_claim_is_checked(
    tmp_path: Path,
) -> None:
    doc = _run(tmp_path)
    answers = [
        e for e in doc["evidence"] if e["type"] == "assistant_message" and e["label"] == ANSWER
    ]
    assert len(answers) == 2, answers
    early, final = sorted(answers, key=lambda e: e["time"])
    tool = next(e for e in doc["evidence"] if e["type"] == "tool_call")
    assert early["time"] < tool["time"] < final["time"]
    # sem.jsonl lines: 1 the early call, 2 the agent span, 5 the final call, 6 the later request
    # whose history holds both answers: each answer once, and the agent's repeat of the last.
    assert early["records"] == ["sem.jsonl:1", "sem.jsonl:6"]
    assert final["records"] == ["sem.jsonl:2", "sem.jsonl:5", "sem.jsonl:6"]
    claims = {c["text"]: c for c in doc["claims"]}
    assert list(claims) == [ANSWER], doc["claims"]
    assert claims[ANSWER]["source"] == final["id"]
    assert claims[ANSWER]["status"] == "supported"
