"""The session importer finds an agent's process by the OTLP connection it sent over: TCP only.

``agent_process``'s ``transport_peer`` rule (the process holding the sender's end of the
loopback connection the events came over) and ``otlp_sender`` rule (the process connected to
the run's OTLP port) read connections. OTLP comes over TCP; a UDP socket with the same numbers
(the two port spaces are separate; ``strace`` records the UDP sockets a process holds at its
attach) is another socket and names no sender.
"""

from __future__ import annotations

import pytest

from otel_bridge.graph.document import GraphNode
from otel_bridge.importers.sessions import agent_process
from otel_bridge.model import EndpointFacts, ProcessFacts
from otel_bridge.review.evidence import EdgeDetail, GEdge, GraphIndex

OTLP_PORT = 4318
SENDER_PORT = 50123


def _index(transport: str) -> GraphIndex:
    """Two unrelated root processes; the second holds a ``transport`` socket from the sender's
    end to the OTLP port."""
    procs = [
        GraphNode(
            id=f"process:h:{pid}:{pid}",
            kind="process",
            facts=ProcessFacts(host_id="h", pid=pid, start_time_ms=pid),
        )
        for pid in (10, 11)
    ]
    port = GraphNode(
        id=f"endpoint:{transport}:127.0.0.1:{OTLP_PORT}",
        kind="endpoint",
        facts=EndpointFacts(transport=transport, address="127.0.0.1", port=OTLP_PORT),
    )
    edge = GEdge(
        "e1",
        procs[1].id,
        port.id,
        "connected_to",
        attrs=EdgeDetail(local_address="127.0.0.1", local_port=SENDER_PORT),
    )
    return GraphIndex.of([*procs, port], [edge])


@pytest.mark.parametrize(("transport", "found"), [("tcp", True), ("udp", False)])
def test_only_a_tcp_socket_names_the_sender(transport: str, found: bool) -> None:
    index = _index(transport)
    by_peer = agent_process((), index, None, [("127.0.0.1", SENDER_PORT, OTLP_PORT)])
    by_port = agent_process((), index, OTLP_PORT)
    sender = "process:h:11:11"
    if found:
        assert by_peer == (sender, "transport_peer")
        assert by_port == (sender, "otlp_sender")
    else:
        assert by_peer == (None, "unknown")  # two roots: no rule names one
        assert by_port == (None, "unknown")
