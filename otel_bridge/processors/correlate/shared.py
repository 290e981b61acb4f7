"""What correlate shares with the components after it: public names, no correlation logic.

``enrich`` (and anything else reading correlate's input or output) takes from here, never from a
private name of a correlate module:

* the default search window and lateness, so a component that waits for correlate's decisions
  derives its wait from them instead of copying the numbers;
* which OS observations state a process start, and which process entity an OS observation is
  about, with the typed :class:`~otel_bridge.model.ProcessFacts` it carries.

Processes are read from ``entity.facts`` only. A process entity without ``ProcessFacts`` is not
parsed back out of its attribute strings: readers skip it and count it (``no_facts``).
"""

from __future__ import annotations

from otel_bridge.model import Entity, EntityKind, Observation, ProcessFacts, RelationKind

DEFAULT_MAX_WINDOW_S = 3.0
"""Upper bound of a declaration's search window (ExecWeave section V-D: 3 s)."""
DEFAULT_ALLOWED_LATENESS_S = 2.0
"""How far behind the newest observation a record may still arrive and count."""

START_EVENTS = frozenset({"process.start", "process.exec"})
"""``event.name`` values of the OS observations that state a process image (start or exec)."""
EXIT_EVENT = "process.exit"

# Looking up an enum member costs ~0.2 us on Python 3.11: the per-observation paths use these.
_SPAWNED = RelationKind.SPAWNED
_PROCESS = EntityKind.PROCESS


def process_entity_of(obs: Observation) -> Entity | None:
    """The process entity an OS observation is about, None when it names no process.

    In a ``spawned`` observation that is the child (the object); otherwise the subject when it is
    a process (file, network, exec and exit events), else the object when it is one.
    """
    if obs.relation == _SPAWNED and obs.object is not None:
        return obs.object
    if obs.subject.kind == _PROCESS:
        return obs.subject
    if obs.object is not None and obs.object.kind == _PROCESS:
        return obs.object
    return None


def process_facts_of(obs: Observation) -> tuple[Entity, ProcessFacts] | None:
    """The process entity of ``obs`` (:func:`process_entity_of`) and its facts.

    None when ``obs`` is about no process, or about one whose entity carries no
    :class:`ProcessFacts` (see :func:`lacks_process_facts` to tell the two apart).
    """
    ent = process_entity_of(obs)
    if ent is None:
        return None
    facts = ent.facts
    if not isinstance(facts, ProcessFacts):
        return None
    return ent, facts


def lacks_process_facts(obs: Observation) -> bool:
    """True when ``obs`` is about a process whose entity carries no :class:`ProcessFacts`."""
    ent = process_entity_of(obs)
    return ent is not None and not isinstance(ent.facts, ProcessFacts)


__all__ = [
    "DEFAULT_ALLOWED_LATENESS_S",
    "DEFAULT_MAX_WINDOW_S",
    "EXIT_EVENT",
    "START_EVENTS",
    "lacks_process_facts",
    "process_entity_of",
    "process_facts_of",
]
