"""Tool calls a model asked for, joined to the tool spans that executed them, by call id.

A model call's output names the tool calls it asks for, each with an id
(:func:`.conventions.output_tool_calls`); a tool span states the id of the call it executes
(``gen_ai.tool.call.id``, OpenInference ``tool_call.id`` / ``tool.id``, Vercel ``ai.toolCall.id``).
When both sides are in one trace and state the same id, the normalizer relates them:

``model asked_for tool_call`` (attribution ``exact_identity``, ``identity_exact=true``,
``inferred=false``, ``causal=false``, method ``tool_call_id``), supported by the model call's
observation (``<model span>#0``) and the tool span's (``<tool span>#0``), timed at the model
call's end (when its output asked for the call: an instant, so neither node's first or last
sighting moves beyond its own span). The subject is the model node (shared by every call of the
model); the observation's attributes name the model call span (``span_id``) and the tool span
(``tool.span_id``). Only the id is compared, never a tool name or a time: a call id is unique
within a model response, and a trace bounds it.

The two spans arrive in any order and in any batch, so both sides are remembered (bounded, see
:class:`CallLinks`): each tool span that states an id the model asked for is related, however
many there are (a framework's tool span and a nested one may both state it). A call the model
asked for that no tool span executed is a ``tool_call_not_observed`` coverage record, given when
the normalizer stops waiting for it: at shutdown (:meth:`CallLinks.drain`), or when the bounded
table drops it. A tool span stating an id no model call asked for is no gap and leaves nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from otel_bridge.model import (
    Attribution,
    CoverageRecord,
    Entity,
    Evidence,
    Observation,
    RelationKind,
    Source,
)

METHOD = "tool_call_id"


def asked_evidence(support: tuple[str, ...]) -> Evidence:
    """The evidence of an ``asked_for`` relation resting on ``support``."""
    return Evidence(
        attribution=Attribution.EXACT_IDENTITY,
        identity_exact=True,
        inferred=False,
        causal=False,
        method=METHOD,
        support=support,
    )


_ASKED_FOR = RelationKind.ASKED_FOR


@dataclass(slots=True)
class _Asked:
    """One tool call a model call asked for."""

    model: Entity
    source: Source
    trace: str
    span_hex: str
    at: int
    """When the model call's output asked for the call: the span's end (else its start)."""
    call_id: str
    executed: bool = False


_Executed = tuple[Entity, str]
"""One tool span that states a call id: its tool call node and its span id (hex)."""

_NONE: tuple[Observation, ...] = ()


class CallLinks:
    """Both sides of the call-id join, keyed by ``<trace hex><call id>`` (the trace id has a
    fixed length, so the key is unambiguous).

    The tool side is on the collector's per-span path (every tool span stating a call id), so it
    is two generations of plain dictionaries as in :class:`.ancestry.Ancestry`: at least the
    most recent ``capacity`` call ids are remembered, at most twice as many. The asked side is
    first in first out, at most ``capacity`` call ids; one dropped unexecuted is reported.
    """

    __slots__ = ("_capacity", "older", "recent", "room", "waiting")

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self.waiting: OrderedDict[str, list[_Asked]] = OrderedDict()
        """The asked side: the model calls that asked for each key, oldest key first."""
        self.recent: dict[str, tuple[_Executed, ...]] = {}
        """The tool side's current generation: the tool spans that executed each key."""
        self.older: dict[str, tuple[_Executed, ...]] = {}
        """The tool side's previous generation."""
        self.room = self._capacity - 1
        """While :attr:`recent` holds fewer keys than this, one more does not start a new
        generation. The span hot path (``spans.SpanNormalizer.normalize_into``) reads these
        four to store a new call id itself when nothing waits (:meth:`executed`'s first case)."""

    def asked(  # noqa: PLR0917 (what the model call's #0 observation holds)
        self,
        call_ids: tuple[str, ...],
        model: Entity,
        source: Source,
        trace: str,
        at: int,
        out: list[Observation],
        coverage: list[CoverageRecord],
    ) -> None:
        """A model call (``source.record_id`` its span, ending at ``at``) asked for ``call_ids``."""
        span_hex = source.record_id
        for call_id in call_ids:
            key = trace + call_id
            entries = self.waiting.setdefault(key, [])
            if any(e.span_hex == span_hex for e in entries):
                continue  # the same span again: its links were made the first time
            entry = _Asked(model, source, trace, span_hex, at, call_id)
            entries.append(entry)
            for done in self._known(key):
                entry.executed = True
                out.append(_link(entry, done))
            while len(self.waiting) > self._capacity:
                _, dropped = self.waiting.popitem(last=False)
                full = "the table of waiting calls was full"
                coverage.extend(_not_observed(e, full) for e in dropped if not e.executed)

    def _known(self, key: str) -> tuple[_Executed, ...]:
        seen = self.recent.get(key)
        if seen is None:
            seen = self.older.get(key, ())
        return seen

    def executed(
        self, trace: str, call_id: str, tool: Entity, span_hex: str
    ) -> tuple[Observation, ...]:
        """A tool span executed ``call_id``: its links to the model calls that asked for it."""
        key = trace + call_id
        executed = self.recent
        seen = executed.get(key)
        if seen is None:
            seen = self.older.pop(key, None) if self.older else None
            executed[key] = ((tool, span_hex),) if seen is None else (*seen, (tool, span_hex))
            if len(executed) >= self._capacity:
                self.older = executed
                self.recent = {}
        else:
            for _, done in seen:
                if done == span_hex:
                    return _NONE  # the same span again
            executed[key] = (*seen, (tool, span_hex))
        if not self.waiting:
            return _NONE
        entries = self.waiting.get(key)
        if entries is None:
            return _NONE
        links: list[Observation] = []
        for entry in entries:
            entry.executed = True
            links.append(_link(entry, (tool, span_hex)))
        return tuple(links)

    def drain(self) -> list[CoverageRecord]:
        """Coverage for every asked-for call no tool span executed; forgets both sides."""
        out = [
            _not_observed(e, "the run ended")
            for entries in self.waiting.values()
            for e in entries
            if not e.executed
        ]
        self.waiting.clear()
        self.recent, self.older = {}, {}
        return out


def _link(asked: _Asked, done: _Executed) -> Observation:
    tool, tool_hex = done
    model_obs, tool_obs = f"{asked.span_hex}#0", f"{tool_hex}#0"
    return Observation(
        id=f"{asked.span_hex}#call:{asked.call_id}",
        time_unix_nano=asked.at,
        source=asked.source,
        subject=asked.model,
        relation=_ASKED_FOR,
        object=tool,
        evidence=asked_evidence(tuple(sorted((model_obs, tool_obs)))),
        occurrence=f"{asked.trace}:{asked.span_hex}:call:{asked.call_id}",
        attrs={
            "trace_id": asked.trace,
            "span_id": asked.span_hex,
            "tool.span_id": tool_hex,
            "gen_ai.tool.call.id": asked.call_id,
        },
    )


def _not_observed(asked: _Asked, why: str) -> CoverageRecord:
    return CoverageRecord(
        source=asked.source,
        reason="tool_call_not_observed",
        time_unix_nano=asked.at,
        detail=(
            f"model call span {asked.span_hex} ({asked.model.label}) asked for tool call "
            f"{asked.call_id!r}; no tool span with that call id was observed in trace "
            f"{asked.trace} before {why}"
        ),
    )
