"""The ``redact`` processor: hides secrets in span and log attributes before anything is stored.

Applies :mod:`otel_bridge.redaction` to every string attribute of spans, span events and log records
(and to log bodies and span status messages): values under a secret-looking key (``*_KEY``,
``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``, ``authorization``, ...) are replaced whole; other strings
are scanned for key shapes, ``Authorization: Bearer`` values, URL credentials and secret query
parameters, secret options (``--password x``), tool-specific options (``curl -u user:pass``,
``mysql -pPW``, ``sshpass -p PW``) in command lines such as ``process.command_line``, and SQL
passwords (``PASSWORD 'x'``, ``IDENTIFIED BY 'x'``) in ``db.statement``. The rule table is in
``docs/redaction.md``. String arrays (``process.command_args``) are redacted as argument vectors.
Observation entity and observation attributes get the same treatment, so a pipeline can redact after
``normalize`` too. Configurable extra patterns and extra secret attribute keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from otel_bridge.component import (
    PROCESSOR,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    FunctionProcessor,
    require_consumer,
)
from otel_bridge.model import AnyValue, Attributes, Batch, Entity, LogRecord, Observation, Span
from otel_bridge.redaction import REDACTED, Redactor

_ARGV_KEYS = frozenset({"process.command_args", "process.command_line.args"})
_UNCHANGED = frozenset({int, bool, float, bytes, type(None)})
"""Value types :meth:`AttributeRedactor.value` returns as they are."""
_KEYS_REMEMBERED = 4096
"""Distinct attribute keys whose secrecy is remembered (the table starts over when full)."""


@dataclass(slots=True)
class Config:
    """Settings of the ``redact`` processor."""

    patterns: list[str] = field(default_factory=list)
    """Extra regular expressions; every match is replaced by ``[REDACTED]``."""
    attribute_keys: list[str] = field(default_factory=list)
    """Extra attribute keys (or variable/option names) whose values are always hidden."""
    allow_keys: list[str] = field(default_factory=list)
    """Attribute keys never redacted (e.g. a key whose name only looks secret)."""

    def validate(self) -> list[str]:
        """Problems with this config, as ``key: message``."""
        problems: list[str] = []
        for i, pattern in enumerate(self.patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"patterns[{i}]: invalid regular expression: {exc}")
        return problems


class AttributeRedactor:
    """Redacts attribute mappings and every record kind of a batch."""

    def __init__(self, config: Config) -> None:
        self._redactor = Redactor(config.patterns, config.attribute_keys)
        self._keys = frozenset(k.lower() for k in config.attribute_keys)
        self._allow = frozenset(config.allow_keys)
        self._secret_keys: dict[str, bool] = {}
        """Attribute key -> whether its values are hidden whole (a pure function of the key)."""

    def _secret_key(self, key: str) -> bool:
        known = self._secret_keys.get(key)
        if known is None:
            known = self._judge_key(key)
            if len(self._secret_keys) >= _KEYS_REMEMBERED:
                self._secret_keys.clear()
            self._secret_keys[key] = known
        return known

    def _judge_key(self, key: str) -> bool:
        if key in self._allow:
            return False
        lowered = key.lower()
        if lowered in self._keys:
            return True
        last = lowered.rsplit(".", 1)[-1]
        return last in ("authorization", "cookie", "set-cookie") or self._redactor.secret_name(last)

    def value(self, key: str, value: AnyValue) -> AnyValue:
        """The redacted form of one attribute value."""
        if key in self._allow:
            return value
        if isinstance(value, str):
            return REDACTED if value and self._secret_key(key) else self._redactor.text(value)
        if isinstance(value, tuple):
            if key in _ARGV_KEYS and all(isinstance(v, str) for v in value):
                return tuple(self._redactor.argv([str(v) for v in value]))
            return tuple(self.value(key, v) for v in value)
        if isinstance(value, Mapping):
            return self.attributes(value)
        return value

    def attributes(self, attrs: Attributes) -> Attributes:
        """A redacted copy of ``attrs`` (the same object when nothing changed)."""
        out: dict[str, AnyValue] | None = None
        allow, secret, remembered = self._allow, self._secret_keys, self._redactor.remembered
        for k, v in attrs.items():
            cls = v.__class__
            # :meth:`value` inlined for the plain values of nearly every attribute
            if cls is str:
                assert isinstance(v, str)  # for the type checker (``cls is str``)
                if not v or k in allow:
                    new: AnyValue = v
                elif secret.get(k) or (secret.get(k) is None and self._secret_key(k)):
                    new = REDACTED
                else:
                    new = remembered(v) or self._redactor.text(v)
            elif cls in _UNCHANGED:
                new = v
            else:
                new = self.value(k, v)
            if out is None:
                if new is v or new == v:
                    continue
                out = {}
                for earlier, kept in attrs.items():
                    if earlier == k:
                        break
                    out[earlier] = kept
            out[k] = new
        return attrs if out is None else out

    def span(self, span: Span) -> Span:
        """``span`` with attributes, event attributes and its status message redacted (an
        exception's message, which may quote the failed command line)."""
        attrs = self.attributes(span.attributes)
        events = tuple(
            msgspec.structs.replace(e, attributes=self.attributes(e.attributes))
            for e in span.events
        )
        status = span.status
        if status.message:
            message = self._redactor.text(status.message)
            if message != status.message:
                status = msgspec.structs.replace(status, message=message)
        if attrs is span.attributes and events == span.events and status is span.status:
            return span
        return msgspec.structs.replace(span, attributes=attrs, events=events, status=status)

    def log(self, record: LogRecord) -> LogRecord:
        """``record`` with attributes and a string body redacted."""
        attrs = self.attributes(record.attributes)
        body = self.value("body", record.body) if record.body is not None else None
        if attrs is record.attributes and body == record.body:
            return record
        return msgspec.structs.replace(record, attributes=attrs, body=body)

    def entity(self, entity: Entity) -> Entity:
        """``entity`` with attributes (and its label) redacted."""
        attrs = self.attributes(entity.attrs)
        label = self._redactor.text(entity.label)
        if attrs is entity.attrs and label == entity.label:
            return entity
        return msgspec.structs.replace(entity, attrs=attrs, label=label)

    def observation(self, obs: Observation) -> Observation:
        """``obs`` with subject, object and observation attributes redacted."""
        return msgspec.structs.replace(
            obs,
            subject=self.entity(obs.subject),
            object=self.entity(obs.object) if obs.object is not None else None,
            attrs=self.attributes(obs.attrs),
        )

    def batch(self, batch: Batch) -> Batch:
        """Every span, log record and observation of ``batch`` redacted."""
        return batch.replace(
            spans=tuple(self.span(s) for s in batch.spans),
            logs=tuple(self.log(r) for r in batch.logs),
            observations=tuple(self.observation(o) for o in batch.observations),
        )


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    return FunctionProcessor(
        AttributeRedactor(config).batch, require_consumer(next_consumer, "redact")
    )


factory: Factory[Config] = Factory(
    type_name="redact",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
)
