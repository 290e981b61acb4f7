"""A minimal client for any OpenAI-compatible chat-completions endpoint, with an audit log.

Stdlib only (``urllib.request``): one ``POST <url>/chat/completions`` per question, JSON in and
out, a timeout, no retries. Every exchange (the request body sent and the response body, or the
error) is appended to an owner-only JSONL audit file before the answer is used, so what the model
was shown and what it said can always be read back (LEDGER's trace-construction audit).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from otel_bridge.errors import OtelBridgeError
from otel_bridge.redaction import redact_text

DEFAULT_MODEL_NAME = "default"
DEFAULT_TIMEOUT = 60.0
MAX_RESPONSE = 4 << 20
"""Bytes of a response read at most; a longer answer is an error."""


class AssistError(OtelBridgeError):
    """The model could not be asked or its answer could not be read."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Where to ask: the base URL (``http://127.0.0.1:8000/v1``), the model name, a timeout."""

    url: str
    name: str = DEFAULT_MODEL_NAME
    timeout: float = DEFAULT_TIMEOUT

    @property
    def method(self) -> str:
        """The ``method`` of what this model proposes: ``model:<name>``."""
        return f"model:{self.name}"

    def endpoint(self) -> str:
        """The chat-completions URL (``/chat/completions`` appended unless already there)."""
        base = self.url.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"


class AuditLog:
    """An owner-only JSONL file of every exchange with the model, appended to."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0

    def append(self, entry: dict[str, Any]) -> None:
        """Append one JSON line (the file is created with mode 0600)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(json.dumps(entry, sort_keys=True).encode() + b"\n")
        self.count += 1


def _content(body: Any) -> str:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise AssistError(
            f"the model's response has no choices[0].message.content ({exc!r})"
        ) from exc
    if not isinstance(content, str):
        raise AssistError("the model's message content is not text")
    return content


def ask(
    config: ModelConfig, system: str, question: dict[str, Any], audit: AuditLog, purpose: str
) -> dict[str, Any]:
    """Ask one question (a JSON object, redacted) and return the answer's JSON object.

    The exchange is audited whatever happens; any failure (connection, timeout, HTTP status,
    a body that is not a chat completion) raises :class:`AssistError` with a clear message.
    """
    request = {
        "model": config.name,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": redact_text(json.dumps(question, sort_keys=True))},
        ],
    }
    entry: dict[str, Any] = {
        "time": time.time_ns(),
        "purpose": purpose,
        "endpoint": config.endpoint(),
        "model": config.name,
        "request": request,
    }
    try:
        raw = _post(config, request)
        entry["response"] = raw.decode("utf-8", "replace")
        body = json.loads(raw)
        value = parse_answer(_content(body))
    except AssistError as exc:
        entry["error"] = str(exc)
        raise
    except json.JSONDecodeError as exc:
        entry["error"] = f"the model's response is not JSON: {exc}"
        raise AssistError(entry["error"]) from exc
    finally:
        audit.append(entry)
    return value


def _post(config: ModelConfig, request: dict[str, Any]) -> bytes:
    data = json.dumps(request).encode()
    req = urllib.request.Request(
        config.endpoint(),
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=config.timeout) as resp:
            raw: bytes = resp.read(MAX_RESPONSE + 1)
    except urllib.error.HTTPError as exc:
        raise AssistError(f"model {config.endpoint()}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AssistError(f"model {config.endpoint()}: cannot be reached ({reason})") from exc
    if len(raw) > MAX_RESPONSE:
        raise AssistError(f"model {config.endpoint()}: response larger than {MAX_RESPONSE} bytes")
    return raw


def parse_answer(text: str) -> dict[str, Any]:
    """The JSON object in an answer (a fenced ```json block is unwrapped). Raises AssistError."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise AssistError(f"the model's answer is not a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise AssistError("the model's answer is not a JSON object")
    return value
