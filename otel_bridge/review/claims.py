"""Claims: sentences of the assistant's result statements, their mentions, and a status each.

A claim is a sentence of an assistant text message sent after the session's first action (the
final answer included) that mentions something checkable: a path, a command, a check outcome or a
number. Each mention is resolved against the session's evidence by the rules of the mention
table in ``docs/review.md`` (a path with a write verb needs an observed write; absence counts as
contradiction only when the collection that would have seen it was ``available``).

A claim is ``contradicted`` if any mention is, ``supported`` if all are, ``partially_supported`` if
some are, else ``unsupported``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from otel_bridge.review import rules
from otel_bridge.review.evidence import Session, runs_of
from otel_bridge.review.messages import LOOKED_FOR
from otel_bridge.review.types import Edge, EvidenceNode, ruled


@dataclass(slots=True)
class Mention:
    """One checkable thing a claim names, and what the evidence says about it."""

    type: str
    text: str
    status: str = "unsupported"
    evidence: list[str] = field(default_factory=list)
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "type": self.type,
            "text": self.text,
            "status": self.status,
            "evidence": self.evidence,
            "reason": self.reason,
            **self.extra,
        }


@dataclass(slots=True)
class Claim:
    """One claim sentence."""

    id: str
    session: str
    text: str
    source: str
    time: int | None
    mentions: list[Mention]
    status: str = "unsupported"
    support: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "id": self.id,
            "session": self.session,
            "text": self.text,
            "status": self.status,
            "source": self.source,
            "time": self.time,
            "mentions": [m.to_dict() for m in self.mentions],
            "support": self.support,
        }


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which collections could see everything (``available``): only then is absence evidence."""

    files: bool
    processes: bool


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see ``rules.SENTENCE_SPLIT``), stripped, non-empty."""
    return [s.strip() for s in rules.SENTENCE_SPLIT.split(text) if s and s.strip()]


def _program_names(session: Session) -> set[str]:
    names = set(rules.CHECK_NAMES)
    for proc in session.of_type("process_run"):
        argv = proc.data.get("argv")
        if argv:
            names.add(rules.normalized_argv(argv)[0] if rules.normalized_argv(argv) else "")
            names.add(argv[0].rsplit("/", 1)[-1])
    return names


def extract(sentence: str, programs: set[str]) -> list[Mention]:
    """The mentions of one sentence."""
    mentions: list[Mention] = []
    rest = sentence
    for quoted in rules.BACKTICKS.findall(sentence):
        words = quoted.split()
        if words and (
            words[0] in programs or (len(words) > 1 and not rules.PATH.fullmatch(quoted))
        ):
            mentions.append(Mention("command", quoted))
            rest = rest.replace(f"`{quoted}`", " ")
    source = rest
    for match in rules.PATH.finditer(source):
        path = match.group(1)
        if (
            path.lower() in rules.NOT_PATHS
            or "://" in source[max(0, match.start() - 8) : match.end()]
        ):
            continue
        role = "written" if rules.WRITE_VERBS.search(sentence) else "referenced"
        mentions.append(Mention("path", path, extra={"role": role}))
        rest = rest.replace(path, " ", 1)
    for pattern in rules.OUTCOMES:
        found = pattern.pattern.search(rest)
        if found is None or any(m.type == "outcome" for m in mentions):
            continue
        negated = bool(rules.NEGATION.search(rest[: found.start()] + found.group(0)))
        named = next(
            (
                n
                for n in rules.CHECK_NAMES
                if re.search(rf"\b{re.escape(n)}\b", found.group(0), re.I)
            ),
            None,
        )
        mentions.append(
            Mention(
                "outcome",
                found.group(0),
                extra={
                    "category": pattern.category,
                    "passed": pattern.passed != negated,
                    "check": rules.CHECK_NAMES.get(named or ""),
                },
            )
        )
        rest = rest.replace(found.group(0), " ", 1)
    for match in rules.NUMBER.finditer(rest):
        number = match.group(1)
        if "." in number or "%" in number or len(number.lstrip("-")) >= 2:
            mentions.append(Mention("number", number))
    return mentions


def _names(text: str, path: str | None) -> bool:
    """Whether a path mention ``text`` names ``path`` (the path itself, or its end)."""
    rel = text[2:] if text.startswith("./") else text
    return bool(path) and (path == text or str(path).endswith("/" + rel))


def _artifacts_for(session: Session, text: str) -> list[EvidenceNode]:
    return [a for a in session.of_type("artifact") if _names(text, a.data.get("path"))]


def resolve_path(m: Mention, session: Session, coverage: Coverage) -> None:
    """Status of a path mention."""
    found = _artifacts_for(session, m.text)
    written = [a for a in found if a.data.get("written")]
    if m.extra.get("role") == "written":
        contested = [write for path, write in session.contested.items() if _names(m.text, path)]
        if written:
            m.status, m.evidence, m.reason = (
                "supported",
                [a.id for a in written],
                "written in the session",
            )
        elif contested:
            named = ", ".join(sorted({s for write in contested for s in write["sessions"]}))
            m.evidence = sorted({write["by"] for write in contested})
            m.reason = (
                f"it was written while several sessions of one agent process ran ({named}), "
                "outside any one tool call: which session wrote it is not known"
            )
        elif coverage.files:
            m.status, m.evidence = "contradicted", [a.id for a in found]
            m.reason = "no process of the session wrote it (file collection available)"
        else:
            m.reason = "no observed write, and the file collection was not available"
        return
    if found:
        m.status, m.evidence, m.reason = "supported", [a.id for a in found], "a session artifact"
    else:
        m.reason = "no process of the session touched it"


def contested_reason(session: Session, process: str, did: str) -> str:
    """Why a mention stays unsupported: the only process that matches is no one session's."""
    sessions = ", ".join(session.contested_processes.get(process, ()))
    return (
        f"a process {did} while several sessions of the agent process ran ({sessions}): "
        "which session's it is, is not known"
    )


def resolve_command(m: Mention, session: Session, coverage: Coverage, sentence: str) -> None:
    """Status of a command mention."""
    words = tuple(m.text.split())
    normal = rules.normalized_argv(words)
    matching = [
        p
        for p in session.of_type("process_run")
        if p.data.get("argv")
        and p.data.get("role") != "agent"
        and (tuple(p.data["argv"]) == words or rules.normalized_argv(p.data["argv"]) == normal)
    ]
    ran = [p for p in matching if p.id not in session.contested_processes]
    if not ran and matching:
        m.evidence = [p.id for p in matching]
        m.reason = contested_reason(session, matching[0].id, "ran it")
        return
    if ran:
        m.status, m.evidence, m.reason = (
            "supported",
            [p.id for p in ran],
            "a session process ran it",
        )
    elif coverage.processes and rules.RUN_VERBS.search(sentence):
        m.status, m.reason = (
            "contradicted",
            "no process of the session ran it (process collection available)",
        )
    else:
        m.reason = "no process of the session ran it"


def resolve_outcome(m: Mention, session: Session, before: int | None) -> None:
    """Status of a check-outcome mention: the last run of each check of its category."""
    last: dict[str, EvidenceNode] = {}
    for proc in runs_of(session):
        check = proc.data.get("check")
        if not check or check["category"] != m.extra["category"]:
            continue
        if m.extra.get("check") and check["name"] != m.extra["check"]:
            continue
        if before is not None and (proc.time or 0) > before:
            continue
        last[check["name"]] = proc
    if not last:
        m.reason = f"no {m.extra['category']} run before the claim"
        return
    codes = {name: p.data.get("exit_code") for name, p in last.items()}
    m.evidence = [p.id for p in last.values()]
    if any(c is None for c in codes.values()):
        m.reason = "the exit code of the last run is unknown"
        return
    failed = [n for n, c in codes.items() if c != 0]
    claimed_pass = bool(m.extra["passed"])
    if claimed_pass:
        m.status = "contradicted" if failed else "supported"
    else:
        m.status = "supported" if failed else "contradicted"
    m.reason = "last runs: " + ", ".join(f"{n} exit {c}" for n, c in sorted(codes.items()))


def resolve_number(m: Mention, session: Session) -> None:
    """Status of a number: it appears in a tool result or an argv."""
    token = re.compile(rf"(?<![\w.]){re.escape(m.text)}(?![\w]|\.\d)")
    for tool in session.of_type("tool_call"):
        if token.search(str(tool.data.get("result") or "")):
            m.status, m.reason = "supported", "in the tool call's result"
            m.evidence.append(tool.id)
    if not m.evidence:
        m.reason = "in no tool result"


def status_of(mentions: Iterable[Mention]) -> str:
    """The claim status from its mentions' statuses."""
    statuses = [m.status for m in mentions]
    if "contradicted" in statuses:
        return "contradicted"
    if statuses and all(s == "supported" for s in statuses):
        return "supported"
    if "supported" in statuses:
        return "partially_supported"
    return "unsupported"


def build_claims(session: Session, coverage: Coverage) -> tuple[list[Claim], list[Edge]]:
    """Claims of the session's result statements, and their ``supports`` edges."""
    first_action = min((t.time or 0 for t in session.of_type("tool_call")), default=None)
    programs = _program_names(session)
    claims: list[Claim] = []
    edges: dict[str, Edge] = {}
    for message in session.of_type("assistant_message"):
        if (
            first_action is None
            or (message.time or 0) < first_action
            or not message.data.get("text")
        ):
            continue
        for sentence in sentences(str(message.data["text"])):
            mentions = extract(sentence, programs)
            if not mentions:
                continue
            claim = Claim(
                id=f"claim:{session.trace_id}:{len(claims) + 1}",
                session=session.id,
                text=sentence,
                source=message.id,
                time=message.time,
                mentions=mentions,
            )
            _resolve(claim, session, coverage, sentence)
            for m in mentions:
                if m.status != "supported":
                    continue
                for target in m.evidence:
                    edge = ruled(
                        claim.id,
                        "supports",
                        target,
                        session=session.id,
                        method="exact_reference",
                        detail={"mention": m.text, "type": m.type},
                    )
                    edges.setdefault(edge.id, edge)
                    if edge.id not in claim.support:
                        claim.support.append(edge.id)
            claims.append(claim)
    return claims, list(edges.values())


NO_TEXT = (
    "no assistant text reached the review: it reads the model's output from the chat and agent "
    f"spans in every convention it knows ({LOOKED_FOR}), and this session's carried none. "
    "Message content is recorded only when the instrumentation captures it: the OpenTelemetry "
    "GenAI instrumentations only when asked (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT); "
    "OpenInference unless OPENINFERENCE_HIDE_OUTPUTS or OPENINFERENCE_HIDE_OUTPUT_TEXT is set; "
    "OpenLLMetry unless TRACELOOP_TRACE_CONTENT=false"
)
NO_ACTION = "the session took no action (no tool call), so no answer reports on one"
NO_LATER_TEXT = (
    "all the assistant's text came before its first action, and claims are read only from what "
    "it said after acting; a run stopped before the model answered has no such text"
)
NO_MENTION = (
    "no sentence of the assistant's text after its first action mentions a path, a command, "
    "a check outcome or a number"
)


def why_no_claims(session: Session) -> str:
    """Why :func:`build_claims` found no claim in ``session``, in plain words."""
    texts = [m for m in session.of_type("assistant_message") if m.data.get("text")]
    if not texts:
        return NO_TEXT
    if not session.of_type("tool_call"):
        return NO_ACTION
    first_action = min(t.time or 0 for t in session.of_type("tool_call"))
    if all((m.time or 0) < first_action for m in texts):
        return NO_LATER_TEXT
    return NO_MENTION


def _resolve(claim: Claim, session: Session, coverage: Coverage, sentence: str) -> None:
    for m in claim.mentions:
        if m.type == "path":
            resolve_path(m, session, coverage)
        elif m.type == "command":
            resolve_command(m, session, coverage, sentence)
        elif m.type == "outcome":
            resolve_outcome(m, session, claim.time)
        else:
            resolve_number(m, session)
    claim.status = status_of(claim.mentions)
