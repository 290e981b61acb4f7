"""A client that only chats: the real ``openai`` client traced by OpenInference, no agent span.

Run by ``test_observe_model_calls.py`` under ``otel-bridge observe`` as
``python openai_chat_agent.py MODEL_URL``: it configures tracing as the examples do
(``examples/example_support.py``: OTLP exporter from the environment, the resource naming this
process), instruments ``openai`` with ``openinference-instrumentation-openai`` and makes one chat
completion against the scripted model server, so its only span is a root ``LLM`` span.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import example_support as support
import openai
from openinference.instrumentation.openai import OpenAIInstrumentor


def main() -> int:
    """One traced chat completion against ``sys.argv[1]``."""
    with support.setup_tracing("openai-chat-client", instrument=False):
        OpenAIInstrumentor().instrument()
        client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-offline-not-a-key")
        answer = client.chat.completions.create(
            model="scripted-model", messages=[{"role": "user", "content": "hello"}]
        )
        print("answered:", answer.choices[0].finish_reason)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
