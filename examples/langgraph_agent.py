"""A LangGraph agent with a shell tool, traced by OpenInference's LangChain instrumentation.

The graph is the classic tool loop: an ``agent`` node calls the chat model, ``tools_condition``
routes tool calls to a ``ToolNode``, and the tool results go back to the model until it answers
with text. The chat model is a small scripted ``BaseChatModel`` (offline, deterministic) that
answers each turn with the step of the model script matching the conversation, as the model
server does, so a tool call arrives exactly as a real model's would: an ``AIMessage`` with
``tool_calls``. The ``run_command`` tool runs a real subprocess (no shell); ``write_file`` writes
a real file.

``openinference.instrumentation.langchain.LangChainInstrumentor`` turns the run into OpenInference
spans (``openinference.span.kind`` ``AGENT``/``CHAIN``/``LLM``/``TOOL``; tool spans carry
``tool.name`` and the tool input as ``input.value``: for ``run_command`` the command string
itself). OpenInference does not make its spans current, so unlike the AutoGen example the tools
cannot add GenAI attributes to their own span: the declared command reaches otel-bridge only
through OpenInference's ``input.value``.

Run: ``otel-bridge observe -- python examples/langgraph_agent.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import example_support as support
import model_server
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor

SERVICE_NAME = "langgraph-agent"


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a model script: tool calls or text, no network."""

    script: model_server.Script
    model_name: str = model_server.DEFAULT_MODEL

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        """Accept the tools as a real model would; the script decides which to call."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        roles = [{"role": "assistant" if isinstance(m, AIMessage) else m.type} for m in messages]
        step = self.script.step_for(roles)
        turn = sum(1 for r in roles if r["role"] == "assistant")
        if step.tool_calls:
            message = AIMessage(
                content="",
                tool_calls=[
                    {"name": c.name, "args": dict(c.arguments), "id": f"call_{turn}_{i}"}
                    for i, c in enumerate(step.tool_calls)
                ],
            )
        else:
            message = AIMessage(content=step.content or "")
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def run_command(command: str) -> str:
    """Run a command (no shell) and return its exit code and output."""
    return support.run_command(command).summary()


@tool
def write_file(path: str, content: str) -> str:
    """Write text to a file and return its absolute path."""
    return f"wrote {support.write_file(path, content)}"


def build_graph(model: ScriptedChatModel) -> Any:
    """The compiled agent graph: model node, tool node, and the loop between them."""
    tools = [run_command, write_file]
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [bound.invoke(state["messages"])]}

    route: Callable[..., Any] = tools_condition
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the graph once and print the final answer."""
    parser = argparse.ArgumentParser(description="A LangGraph agent traced with OpenInference.")
    parser.add_argument("--script", help="model script (JSON, see model_server.py)")
    parser.add_argument(
        "--task", default="Run the scripted commands and write the notes.", help="the user task"
    )
    args = parser.parse_args(argv)
    with support.setup_tracing(SERVICE_NAME) as tracing:
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.provider)
        try:
            model = ScriptedChatModel(script=model_server.load_script(args.script))
            result = build_graph(model).invoke(
                {"messages": [HumanMessage(content=args.task)]}, {"recursion_limit": 25}
            )
        finally:
            instrumentor.uninstrument()
    print(result["messages"][-1].content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
