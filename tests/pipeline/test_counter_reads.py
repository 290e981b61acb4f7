"""Typed counter reads refuse a name no matching component declares (a reader's typo)."""

from __future__ import annotations

import pytest

from otel_bridge.component import RECEIVER, Telemetry, UndeclaredCounterError
from otel_bridge.receivers.otlp import factory as otlp_factory


def test_a_declared_counter_reads_its_value() -> None:
    """A declared counter reads what was counted, per instance and summed per type."""
    telemetry = Telemetry()
    view = telemetry.for_factory(otlp_factory, "otlp/agents")
    view.count("spans_accepted", 9)
    assert telemetry.value("spans_accepted", kind=RECEIVER, id="otlp/agents") == 9
    assert telemetry.total("spans_accepted", kind=RECEIVER, type="otlp") == 9


def test_an_undeclared_name_is_refused_not_read_as_zero() -> None:
    """A misspelt counter name raises instead of reading 0 for ever."""
    telemetry = Telemetry()
    telemetry.for_factory(otlp_factory, "otlp")
    with pytest.raises(UndeclaredCounterError, match="spans_acepted"):
        telemetry.total("spans_acepted", kind=RECEIVER, type="otlp")


def test_no_instance_of_the_type_reads_zero() -> None:
    """With no component of that type configured there is nothing to read: 0, not an error."""
    assert Telemetry().total("spans_accepted", kind=RECEIVER, type="otlp") == 0
