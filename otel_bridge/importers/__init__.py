"""Importers of agent telemetry that does not come as GenAI / OpenInference spans.

``codingagents``: Claude Code, Codex CLI and Gemini CLI OTel log events and Codex session
transcripts (rollout JSONL), read into the review's evidence nodes (``docs/review.md``, "Coding
agents").
"""
