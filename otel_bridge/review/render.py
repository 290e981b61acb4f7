"""Claim-centred text of a review: ``review.md`` and the terminal summary.

Both start from the claims (status first, then the evidence each rests on or the reason it does
not), then list the findings; nothing here decides anything, it only prints ``review.json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

STATUS_MARK = {
    "supported": "SUPPORTED",
    "partially_supported": "PARTIAL",
    "unsupported": "UNSUPPORTED",
    "contradicted": "CONTRADICTED",
}


def _labels(doc: Mapping[str, Any]) -> dict[str, str]:
    return {n["id"]: n.get("label") or n["id"] for n in doc["evidence"]}


def _mention_lines(claim: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    lines = []
    for m in claim["mentions"]:
        evidence = ", ".join(labels.get(e, e) for e in m["evidence"]) or "none"
        lines.append(
            f"    - {m['type']} `{m['text']}`: {m['status']} ({m['reason']}; evidence: {evidence})"
        )
    return lines


NO_SESSION = "no agent session in this run (no GenAI agent, model or tool span)"
"""Why a review has no claims and no findings at all, in the summary and in ``review.md``."""


def summary_lines(doc: Mapping[str, Any], *, brief: bool = False) -> list[str]:
    """The terminal summary: per session, each claim with its status, then the findings.

    ``brief`` (the end of ``observe``, after its report): why a session has no claims in its
    first clause only (review.md has the rest)."""
    labels = _labels(doc)
    out: list[str] = []
    for session in doc["sessions"]:
        counts = ", ".join(f"{n} {s}" for s, n in session["claims"].items() if n)
        why = session.get("no_claims") or ""
        if brief and ": " in why:  # the detail after the first clause: in review.md
            why = why.split(": ", 1)[0] + "; review.md says where it looks"
        out.append(
            f"session {session['trace_id']} ({', '.join(session['agents']) or 'agent unknown'}): "
            f"{counts or 'no claims'}" + (f" ({why})" if not counts and why else "")
        )
        for claim in (c for c in doc["claims"] if c["session"] == session["id"]):
            out.append(f"  [{STATUS_MARK[claim['status']]}] {claim['text']}")
            out.extend(_mention_lines(claim, labels))
        findings = [f for f in doc["findings"] if f["session"] == session["id"]]
        for finding in findings:
            out.append(f"  ! {finding['kind']}: {finding['message']}")
        if not findings:
            out.append("  no findings")
    if not doc["sessions"]:
        out.append(NO_SESSION)
    return out


def render_markdown(doc: Mapping[str, Any]) -> str:
    """``review.md``: claims with their evidence, findings, then the workflow per session."""
    labels = _labels(doc)
    run = doc["run"]
    lines = [f"# Review of run {run.get('id') or run.get('dir')}", ""]
    lines.append(
        f"Records: {doc['records']['total']} ({doc['records']['span']} spans, "
        f"{doc['records']['os_event']} OS events). File collection available: "
        f"{run['coverage']['files_available']}; process collection available: "
        f"{run['coverage']['processes_available']}."
    )
    if not doc["sessions"]:
        lines += ["", NO_SESSION[0].upper() + NO_SESSION[1:] + "."]
    for session in doc["sessions"]:
        sid = session["id"]
        lines += ["", f"## Session {session['trace_id']}", "", "### Claims", ""]
        claims = [c for c in doc["claims"] if c["session"] == sid]
        for claim in claims:
            lines.append(f"- **{claim['status']}**: {claim['text']}")
            lines.extend(_mention_lines(claim, labels))
        if not claims:
            why = session.get("no_claims")
            lines.append(f"No claims: {why}." if why else "No claims.")
        lines += ["", "### Findings", ""]
        findings = [f for f in doc["findings"] if f["session"] == sid]
        for f in findings:
            evidence = ", ".join(labels.get(e, e) for e in f["evidence"])
            lines.append(f"- **{f['kind']}**: {f['message']} (evidence: {evidence})")
        if not findings:
            lines.append("No findings.")
        lines += _artifact_lines(doc, sid)
        lines += unattributed_lines(doc, session, labels)
        lines += ["", "### Workflow", "", "| phase | rules | members |", "| --- | --- | --- |"]
        for w in (w for w in doc["workflow"] if w["session"] == sid):
            members = "; ".join(labels.get(m, m) for m in w["members"])
            lines.append(
                f"| {w['phase']} | {', '.join(w['rules'])} | {members.replace('|', '/')} |"
            )
    return "\n".join(lines) + "\n"


_READ_AT = {"close_write": "at the writer's close", "run_end": "at the end of the run"}
_STATES = {
    "too_large": "larger than capture.max_bytes: not read",
    "changed": "changed while it was read: no hash",
    "unreadable": "could not be read",
    "missing": "gone when it was to be read",
    "not_regular": "not a regular file: not read",
}


def _content(n: Mapping[str, Any]) -> str:
    state = n.get("content_state")
    if state is None:
        return "content not captured (off by default: `observe --hash-files`)"
    when = _READ_AT.get(n.get("content_read_at") or "", "when unknown")
    if state == "hashed":
        return f"{n['size']} bytes, sha256 `{n['sha256']}` (read {when})"
    size = f"{n['size']} bytes, " if n.get("size") is not None else ""
    detail = f" ({n['content_detail']})" if n.get("content_detail") else ""
    return f"{size}{_STATES.get(state, state)}{detail} (read {when})"


def _artifact_lines(doc: Mapping[str, Any], sid: str) -> list[str]:
    """The files the session wrote: how the write was seen, and their size and hash."""
    written = [
        n
        for n in doc["evidence"]
        if n["session"] == sid and n["type"] == "artifact" and n.get("written")
    ]
    if not written:
        return []
    lines = ["", "### Files written", ""]
    for n in sorted(written, key=lambda n: str(n.get("path"))):
        how = (n.get("write_observed") or "written").replace("_", " ")
        lines.append(f"- `{n.get('path')}` ({how}): {_content(n)}")
    return lines


GROUPED = 5
"""More processes than this with the same rule and candidates are one line in ``review.md``
(each is still in ``review.json``)."""


def unattributed_lines(
    doc: Mapping[str, Any], session: Mapping[str, Any], labels: Mapping[str, str]
) -> list[str]:
    """What the agent process did that time alone cannot give to one call or one session."""
    ambiguous = [
        n
        for n in doc["evidence"]
        if n["session"] == session["id"]
        and n["type"] == "process_run"
        and n.get("role") == "ambiguous"
    ]
    contested = session.get("contested_writes") or {}
    if not ambiguous and not contested:
        return []
    calls = {
        n["id"]: f"{n['label']} ({n.get('call_id') or n['id'].rsplit(':', 1)[-1]})"
        for n in doc["evidence"]
        if n["type"] == "tool_call"
    }
    lines = ["", "### Not attributed (ran while several calls or sessions did)", ""]
    groups: dict[tuple[str, tuple[str, ...]], list[Mapping[str, Any]]] = {}
    for n in ambiguous:
        groups.setdefault((str(n.get("rule")), tuple(n.get("candidates") or ())), []).append(n)
    for (rule, candidates), members in groups.items():
        among = ", ".join(calls.get(c) or labels.get(c, c) for c in candidates)
        if len(members) > GROUPED:  # many (a launcher's helpers): counted, by program
            names = Counter((m.get("argv") or ["(unknown)"])[0].rsplit("/", 1)[-1] for m in members)
            ordered = sorted(names.items(), key=lambda item: (-item[1], item[0]))
            shown = ", ".join(f"{name} x{count}" for name, count in ordered)
            lines.append(f"- {len(members)} processes ({rule}: {shown}): one of {among}")
            continue
        for n in members:
            argv = " ".join(n.get("argv") or []) or n.get("label") or n["id"]
            pid = n["id"].split(":")[2] if n["id"].count(":") >= 3 else "?"
            lines.append(f"- process `{argv}` (pid {pid}, {rule}): one of {among}")
    for path, write in contested.items():
        by = labels.get(write["by"], write["by"])
        lines.append(f"- write of `{path}` by {by}: one of {', '.join(write['sessions'])}")
    return lines
