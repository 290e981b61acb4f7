"""A third-party processor for the entry-point test: stamps every span with ``plugin.tag``."""

from __future__ import annotations

from dataclasses import dataclass

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
from otel_bridge.model import Batch


@dataclass(slots=True)
class Config:
    """What to stamp."""

    tag: str = "plugin"

    def validate(self) -> list[str]:
        """An empty tag is refused, with its key path."""
        return [] if self.tag else ["tag: must not be empty"]


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    def stamp(batch: Batch) -> Batch:
        spans = tuple(
            msgspec.structs.replace(s, attributes={**s.attributes, "plugin.tag": config.tag})
            for s in batch.spans
        )
        return batch.replace(spans=spans)

    return FunctionProcessor(stamp, require_consumer(next_consumer, "tag"))


factory: Factory[Config] = Factory(
    type_name="tag",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
    signals=frozenset({"traces", "logs", "evidence"}),
)
