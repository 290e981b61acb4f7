"""Why a tool call has no linked process: a short stable reason code and its words.

One table for every reader that says it: ``report.md`` (its *Not linked, and why* section) and
the ``enrich`` processor (``otel_bridge.link.reason`` and ``otel_bridge.link.explanation`` on an
unlinked tool-call span, ``docs/exporters.md``). The codes are the ``correlate`` processor's skip
reasons (:data:`otel_bridge.model.BRIDGE_SKIP_ATTR`, what it counts as ``skip.<reason>``), plus
:data:`NO_COMMAND` and :data:`NO_MATCH` for a call the bridge recorded no reason for, and the
:data:`UNOBSERVED` codes for a call whose agent's process the host receiver did not follow while
it ran (a standing collector; said by ``enrich``).
"""

from __future__ import annotations

NO_COMMAND = "no_command"
"""The call declared no command, and no process carried its trace context."""
NO_MATCH = "no_match"
"""The call declared a command; no process carried its trace context or matched it."""

WHY: dict[str, str] = {
    "no_candidate": "no process carried its trace context, and none running its command "
    "started while it ran (its time window: at most `max_window`, 3 s by default)",
    "several_candidates": "no process carried its trace context, and several processes "
    "matched its command while it ran: none is picked",
    "process_ambiguous": "no process carried its trace context, and the process that matched "
    "its command matched another tool call too",
    "exact_identity_preferred": "a process carried its trace context (TRACEPARENT), so only "
    "an exact link is taken, and none could be resolved",
    "contradicts_exact": "the process that matched its command is exactly linked to another span",
    "late_declaration": "its span arrived after the process events of its time were no longer kept",
    "unsupported_command.control_operator": "no process carried its trace context, and its "
    "command chains, pipes or redirects commands (a shell operator: `;`, `&&`, `|`, `&`, or a "
    "redirection such as `>`), which the command matcher does not read, so no process was "
    "matched to it",
    "unsupported_command.command_substitution": "no process carried its trace context, and "
    "its command substitutes another command's output (`$(...)` or backticks), so it names no "
    "single process to match",
    "unsupported_command.builtin": "no process carried its trace context, and its command is "
    "a shell builtin or an assignment, which starts no process",
    "unsupported_command.expansion_in_head": "no process carried its trace context, and its "
    "command's program is a shell expansion, unknown until it ran",
    "unsupported_command.unbalanced_quotes": "no process carried its trace context, and its "
    "command's quotes do not balance, so it could not be read",
    "unsupported_command.empty": "no process carried its trace context, and its command is empty",
}
"""Why the singleton bridge skipped a call (``correlate.skip`` on its node, the reason code),
in plain words."""
NO_COMMAND_WHY = (
    "with no command there is nothing to match a process against, and no process carried its "
    "trace context: it ran inside the agent's own process, or its processes did not carry it"
)
"""Why a call that declared no command has no process (:data:`NO_COMMAND`)."""
NO_MATCH_WHY = (
    "it ran inside the agent's own process, or its processes carried no trace context and "
    "matched nothing unambiguously"
)
"""Why a call that declared a command has no process (:data:`NO_MATCH`)."""


AGENT_NOT_FOLLOWED = "agent_not_followed"
"""The host receiver began following the calling agent's process only after the call ended."""
AGENT_FOLLOWED_LATE = "agent_followed_late"
"""The host receiver began following the calling agent's process while the call ran."""
AGENT_UNAVAILABLE = "agent_unavailable"
"""The host receiver could not follow the calling agent's process at all."""

UNOBSERVED: dict[str, str] = {
    AGENT_NOT_FOLLOWED: "the host receiver was not yet following the agent's process when "
    "this call ran (a standing collector follows a process from its first span, which came "
    "after the call ended): what the call ran, wrote and reached is unknown, not absent",
    AGENT_FOLLOWED_LATE: "the host receiver began following the agent's process only while "
    "this call ran (from its first span): what the call ran before then is unknown, and "
    "nothing observed after it matched",
    AGENT_UNAVAILABLE: "the host receiver could not follow the agent's process (it had "
    "exited, or the process that sent its spans could not be found, or no backend could "
    "observe it): what this call ran, wrote and reached is unknown, not absent",
}
"""Why a call whose agent's process the OS plane did not watch while it ran has no process, in
plain words. These replace an absence reason (``no_candidate``, :data:`NO_MATCH`,
:data:`NO_COMMAND`): nothing was linked because nothing could have been seen, not because
nothing ran."""

ABSENCE_REASONS = frozenset({"no_candidate", NO_MATCH, NO_COMMAND})
"""Reasons that say nothing observed fitted the call, which an unobserved agent explains."""


def unlinked_reason(skip: str | None, command: str) -> tuple[str, str]:
    """The reason code and its words for a tool call no process is linked to: ``skip``, the
    bridge's skip reason for it (None when it recorded none), ``command``, what it declared."""
    if skip is not None and skip in WHY:
        return skip, WHY[skip]
    if skip is not None:
        return skip, f"no process carried its trace context, and the bridge skipped it ({skip})"
    return (NO_MATCH, NO_MATCH_WHY) if command else (NO_COMMAND, NO_COMMAND_WHY)
