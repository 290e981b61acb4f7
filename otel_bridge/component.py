"""Component contracts: what a receiver, processor and exporter promise, and what they may assume.

A pipeline is ``receivers -> processors (in order) -> exporters (fan-out)``. Data moves by one
synchronous call, :meth:`Consumer.consume`, carrying an immutable :class:`~otel_bridge.model.Batch`.

Lifecycle (the same for every kind):

* ``create`` (the factory) builds a component from its validated config. It must not open
  sockets, start threads or touch the disk beyond checking paths: that is ``start``'s job.
* ``start(host)`` acquires resources. It is called once, exporters first and receivers last, so
  nothing is consumed before its consumers are ready. Raising :class:`StartupError` aborts the
  whole start-up; components already started are shut down in reverse order.
* ``consume(batch)`` may be called from any thread, concurrently, at any time between ``start``
  and the return of ``shutdown``. It must not mutate the batch. It returns once the batch is
  accepted (queued or handled); a component that cannot accept it raises, and the receiver
  reports the failure to its client. At run time bad input is counted and reported through
  :class:`Telemetry`, never allowed to crash the process.
* ``shutdown()`` flushes what was accepted, then releases resources. It is safe before
  ``start`` and safe twice. Receivers stop first (no new data), exporters last (everything
  accepted upstream is written).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from otel_bridge.model import Batch

RECEIVER = "receiver"
PROCESSOR = "processor"
EXPORTER = "exporter"
EXTENSION = "extension"
PIPELINE = "pipeline"
"""Counter kind of a pipeline (``pipeline.<id>.sent``), counted by the collector."""
COLLECTOR = "collector"
"""Counter kind of the collector itself (``collector.service.shutdown_errors``)."""


@runtime_checkable
class Consumer(Protocol):
    """Accepts batches. Implemented by processors, exporters and pipeline fan-outs."""

    def consume(self, batch: Batch) -> None:
        """Accept ``batch``; see the module docstring for the contract."""


@runtime_checkable
class Component(Protocol):
    """Something with a lifecycle."""

    def start(self, host: Host) -> None:
        """Acquire resources and begin work. Called once."""

    def shutdown(self) -> None:
        """Flush, then release resources. Safe before start and safe twice."""


class Receiver(Component, Protocol):
    """Produces batches into the consumer it was created with."""


class Processor(Component, Consumer, Protocol):
    """Transforms batches and passes them to the consumer it was created with."""


class Exporter(Component, Consumer, Protocol):
    """Writes batches out of the pipeline."""


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """One counter a component declares on its :class:`Factory`.

    Its id in :meth:`Telemetry.counters` is ``<kind>.<component id>.<name>``, e.g.
    ``receiver.otlp/agents.spans_accepted``. A ``labeled`` counter is a family counted with a
    label (``events`` with ``process.start``: id ``receiver.host.events.process.start``), read
    per label with :meth:`Telemetry.by_label`.
    """

    name: str
    description: str
    unit: str = "{records}"
    labeled: bool = False


@dataclass(frozen=True, slots=True)
class CounterScope:
    """Whose counters a :class:`Telemetry` view counts: one component instance."""

    kind: str
    id: str
    type: str
    specs: Mapping[str, CounterSpec]

    @classmethod
    def of(cls, kind: str, component_id: str, specs: Iterable[CounterSpec]) -> CounterScope:
        """The scope of instance ``component_id`` (``type`` or ``type/name``) of ``kind``."""
        return cls(kind, component_id, component_id.split("/", 1)[0], {s.name: s for s in specs})

    @property
    def prefix(self) -> str:
        """``<kind>.<component id>``."""
        return f"{self.kind}.{self.id}"


class UndeclaredCounterError(LookupError):
    """A component counted a counter its factory does not declare (a bug)."""


_Key = tuple[str, str, str, str]
"""``(kind, component id, counter name, label)``."""


class _TelemetryState:
    """What every view of one :class:`Telemetry` shares."""

    def __init__(self, logger: logging.Logger, strict: bool) -> None:
        self.lock = threading.Lock()
        self.counts: dict[_Key, int] = {}
        self.scopes: dict[tuple[str, str], CounterScope] = {}
        self.undeclared: Counter[str] = Counter()
        self.reported: set[str] = set()
        self.notes: dict[str, str] = {}
        self.logger = logger
        self.strict = strict


class Telemetry:
    """Declared counters and one-time reports for a running collector. Thread-safe.

    A component counts through the view its :class:`CreateSettings` carries, scoped to the
    component instance (:meth:`scoped`): ``telemetry.count("spans_accepted", n)`` adds to
    ``receiver.<id>.spans_accepted``. Only counters its factory declares
    (:attr:`Factory.counters`, plus the pipeline's standard ones for its kind) may be counted;
    anything else is a bug: :class:`UndeclaredCounterError` when ``strict`` (tests), otherwise
    counted under :meth:`undeclared` and reported once. Readers use the typed reads
    (:meth:`total`, :meth:`value`, :meth:`by_label`), never string matching; :meth:`counters`
    is a snapshot by full id for display and the run summary.

    ``report_once`` logs a problem the first time it happens, so a flood of bad input produces
    one log line and a counter, not a log storm.
    """

    def __init__(self, logger: logging.Logger | None = None, *, strict: bool = False) -> None:
        self._state = _TelemetryState(logger or logging.getLogger("otel_bridge"), strict)
        self._scope: CounterScope | None = None

    # -- views ----------------------------------------------------------------------------

    @property
    def scope(self) -> CounterScope | None:
        """The component this view counts for; None for the collector-wide view."""
        return self._scope

    def scoped(self, scope: CounterScope | None) -> Telemetry:
        """A view sharing every counter and note, counting for ``scope``."""
        view = Telemetry.__new__(Telemetry)
        view._state = self._state
        view._scope = scope
        if scope is not None:
            key = (scope.kind, scope.id)
            with self._state.lock:
                known = self._state.scopes.get(key)
                if known is None:
                    self._state.scopes[key] = scope
                elif not scope.specs.keys() <= known.specs.keys():
                    # One instance seen through several views (the pipeline's standard counters,
                    # the component's own): readers see every counter any of them declares.
                    specs = {**known.specs, **scope.specs}
                    self._state.scopes[key] = CounterScope(scope.kind, scope.id, scope.type, specs)
        return view

    def for_factory(self, factory: Factory[Any], component_id: str) -> Telemetry:
        """The view of instance ``component_id`` made by ``factory``."""
        return self.scoped(CounterScope.of(factory.kind, component_id, declared_counters(factory)))

    def owned_by(self, factory: Factory[Any], component_id: str) -> Telemetry:
        """This view if it counts for a component already, else that of ``component_id``.

        For components that can also be built directly (tests, benchmarks) with a plain
        ``Telemetry()``.
        """
        return self if self._scope is not None else self.for_factory(factory, component_id)

    def in_scope_of(self, other: Telemetry) -> Telemetry:
        """This telemetry's counters, counted for the component ``other`` counts for."""
        return self.scoped(other.scope)

    # -- writing --------------------------------------------------------------------------

    def count(self, name: str, n: int = 1, *, label: str = "") -> None:
        """Add ``n`` to this component's declared counter ``name`` (``label`` for a family)."""
        scope = self._scope
        spec = scope.specs.get(name) if scope is not None else None
        if scope is None or spec is None or (label and not spec.labeled):
            self._undeclared(name, n, label)
            return
        key = (scope.kind, scope.id, name, label)
        state = self._state
        with state.lock:
            state.counts[key] = state.counts.get(key, 0) + n

    def _undeclared(self, name: str, n: int, label: str) -> None:
        scope = self._scope
        full = ".".join(p for p in (scope.prefix if scope else "", name, label) if p)
        if self._state.strict:
            raise UndeclaredCounterError(f"counter {full!r} is not declared by its factory")
        with self._state.lock:
            self._state.undeclared[full] += n
        self.report_once(
            f"undeclared:{full}", f"counter {full!r} is not declared by its factory (a bug)"
        )

    def report_once(self, key: str, message: str) -> None:
        """Log ``message`` at warning level the first time ``key`` is reported."""
        with self._state.lock:
            if key in self._state.reported:
                return
            self._state.reported.add(key)
        self._state.logger.warning("%s", message)

    def note(self, key: str, value: str) -> None:
        """Record a status string for the log or summary (e.g. which host backend runs)."""
        with self._state.lock:
            self._state.notes[key] = value

    # -- typed reads ----------------------------------------------------------------------

    def _matching(
        self, name: str, kind: str, type_: str | None, id_: str | None, label: str | None
    ) -> list[tuple[_Key, int]]:
        with self._state.lock:
            scopes = list(self._state.scopes.values())
            items = list(self._state.counts.items())
        types = {(s.kind, s.id): s.type for s in scopes}
        readable = [
            s
            for s in scopes
            if s.kind == kind
            and (type_ is None or s.type == type_)
            and (id_ is None or s.id == id_)
        ]
        if readable and not any(name in s.specs for s in readable):
            # A reader's typo reads 0 for ever: refuse it like an undeclared count.
            raise UndeclaredCounterError(
                f"no {kind} {type_ or id_ or ''} declares a counter {name!r}".replace("  ", " ")
            )
        return [
            (key, v)
            for key, v in items
            if key[0] == kind
            and key[2] == name
            and (id_ is None or key[1] == id_)
            and (type_ is None or types.get((key[0], key[1])) == type_)
            and (label is None or key[3] == label)
        ]

    def total(
        self, name: str, *, kind: str, type: str | None = None, label: str | None = None
    ) -> int:
        """Counter ``name`` summed over every instance of ``kind`` (of one ``type`` if given)."""
        return sum(v for _, v in self._matching(name, kind, type, None, label))

    def value(self, name: str, *, kind: str, id: str, label: str | None = None) -> int:
        """Counter ``name`` of one instance (summed over labels unless ``label`` is given)."""
        return sum(v for _, v in self._matching(name, kind, None, id, label))

    def by_label(
        self, name: str, *, kind: str, type: str | None = None, id: str | None = None
    ) -> dict[str, int]:
        """A labeled counter family by label, summed over the matching instances."""
        out: Counter[str] = Counter()
        for key, v in self._matching(name, kind, type, id, None):
            out[key[3]] += v
        return dict(out)

    def instances(self, kind: str, type: str | None = None) -> list[str]:
        """Ids of the instances of ``kind`` (and ``type``) that have a counting view."""
        with self._state.lock:
            scopes = list(self._state.scopes.values())
        return sorted(s.id for s in scopes if s.kind == kind and type in (None, s.type))

    def declared(self) -> dict[str, CounterSpec]:
        """Every declared counter of every scoped instance, by ``<kind>.<id>.<name>``."""
        with self._state.lock:
            scopes = list(self._state.scopes.values())
        return {f"{s.prefix}.{name}": spec for s in scopes for name, spec in s.specs.items()}

    def counters(self) -> dict[str, int]:
        """A snapshot of every counter by full id (``receiver.otlp.spans_accepted``)."""
        with self._state.lock:
            items = list(self._state.counts.items())
        return {".".join(p for p in (k, i, n, lab) if p): v for (k, i, n, lab), v in items}

    def undeclared(self) -> dict[str, int]:
        """Counts of undeclared counters (bugs; always empty in a correct build)."""
        with self._state.lock:
            return dict(self._state.undeclared)

    def notes(self) -> dict[str, str]:
        """A snapshot of every status note."""
        with self._state.lock:
            return dict(self._state.notes)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessInterest:
    """A process that reported telemetry, as its span resource states it.

    ``host_id`` is ``""`` and ``start_time_ms`` None when the resource did not state them.
    ``pid`` is 0 when the resource states no ``process.pid`` (the OpenTelemetry SDKs' default):
    the sender cannot be followed, and the host receiver says so rather than staying silent.
    """

    pid: int
    host_id: str = ""
    start_time_ms: int | None = None
    instance_id: str = ""
    """The resource's ``service.instance.id`` (SDKs set a fresh one per process): tells a
    recycled pid apart when no ``process.creation.time`` is stated."""
    seen_ns: int = 0
    """When the collector first received telemetry from it (Unix ns)."""
    source: str = ""
    """Where it was learned (the receiver id)."""
    service: str = ""
    """The resource's ``service.name`` (names a sender that stated no pid)."""
    peer: tuple[str, int, int] | None = None
    """For a sender that stated no pid, the transport peer of the request that carried it, as
    the receiver saw it: (sender address, sender port, the receiver's port). The host receiver
    finds the process holding that end of the connection in the socket tables."""

    @property
    def key(self) -> tuple[int, str, int | None, str, str]:
        """What tells one reporting process from another (:class:`ProcessInterests` dedupes)."""
        return (self.pid, self.host_id, self.start_time_ms, self.instance_id, self.service)


InterestCallback = Callable[[ProcessInterest], None]


class ProcessInterests:
    """Processes of interest, published by the pipeline, followed by the host receiver.

    The collector publishes the ``process.pid`` (+ ``host.id``, ``process.creation.time``) of
    each span resource a receiver hands to the pipelines (only while someone subscribes, so a
    collector without a host receiver pays nothing). Each distinct process is published once.
    A subscriber is called on the publisher's thread and must only queue the interest;
    :meth:`subscribe` replays what was published before it subscribed. Thread-safe.

    A subscriber that acts on an interest later (the host receiver's follower) subscribes with
    ``settles=True`` and calls :meth:`settle` once per interest it was handed, when what the
    interest leads to is done and its records are emitted: :attr:`unsettled` counts the
    interests still being acted on. A reader that must not decide while the host plane may still
    record something about a sender (``correlate``'s early ``no_connection`` verdict) waits for
    it to be 0.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str, int | None, str, str], ProcessInterest] = {}
        self._subscribers: list[InterestCallback] = []
        self._settling: set[int] = set()
        """``id`` of the subscribers that settle what they are handed."""
        self._unsettled = 0
        self._settled_at = 0

    @property
    def wanted(self) -> bool:
        """True while at least one subscriber listens (publishers may skip the work otherwise)."""
        return bool(self._subscribers)

    def known(self, key: tuple[int, str, int | None, str, str]) -> bool:
        """True when the process with this :attr:`ProcessInterest.key` was published already
        (cheap, for publishers)."""
        return key in self._seen

    def publish(self, interest: ProcessInterest) -> None:
        """Tell every subscriber about ``interest`` unless the same process was published."""
        key = interest.key
        with self._lock:
            if key in self._seen:
                return
            self._seen[key] = interest
            subscribers = list(self._subscribers)
            self._unsettled += sum(1 for c in subscribers if id(c) in self._settling)
        for callback in subscribers:
            callback(interest)

    @property
    def unsettled(self) -> int:
        """Interests handed to a settling subscriber that it has not settled yet."""
        with self._lock:
            return self._unsettled

    def settled_since(self) -> int | None:
        """None while an interest is :attr:`unsettled`, else when the last one was settled
        (``time.monotonic_ns()``; 0 when none ever was)."""
        with self._lock:
            return None if self._unsettled else self._settled_at

    def settle(self) -> None:
        """One interest handed to a settling subscriber is done (its records emitted)."""
        with self._lock:
            self._unsettled = max(0, self._unsettled - 1)
            self._settled_at = time.monotonic_ns()

    def subscribe(self, callback: InterestCallback, *, settles: bool = False) -> Callable[[], None]:
        """Call ``callback`` for every interest (past ones first); returns the unsubscriber.
        With ``settles`` the subscriber calls :meth:`settle` once for each interest."""
        with self._lock:
            self._subscribers.append(callback)
            past = list(self._seen.values())
            if settles:
                self._settling.add(id(callback))
                self._unsettled += len(past)
        for interest in past:
            callback(interest)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
                if id(callback) in self._settling:
                    # nothing it was handed will be settled any more
                    self._settling.discard(id(callback))
                    self._unsettled = 0

        self._settled_at = 0

        return unsubscribe


@dataclass(slots=True)
class Host:
    """What a started component may use from the collector that runs it."""

    telemetry: Telemetry = field(default_factory=Telemetry)
    extensions: dict[str, object] = field(default_factory=dict)
    run_dir: str | None = None
    """The run directory when running under ``observe``; None otherwise."""
    interests: ProcessInterests = field(default_factory=ProcessInterests)
    """Processes that report telemetry (the pipeline publishes them, :class:`ProcessInterests`)."""
    listening: Callable[[], tuple[Endpoint, ...]] = field(default=lambda: ())
    """Where the collector's receivers listen now (their bound endpoints, read when called):
    the host receiver follows processes whose OTLP exporter is set to send there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSettings:
    """What a factory is told about the instance it creates."""

    id: str
    """The component id as configured, ``type`` or ``type/name``."""
    pipeline: str = ""
    """For processors: the pipeline the instance belongs to."""
    telemetry: Telemetry = field(default_factory=Telemetry)

    @property
    def instance_name(self) -> str:
        """``pipeline.id`` for a processor (one instance per pipeline), else the id."""
        return f"{self.pipeline}.{self.id}" if self.pipeline else self.id

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the component."""
        return logging.getLogger(f"otel_bridge.{self.id}")


C = TypeVar("C")

_Create = Callable[[CreateSettings, Any, Consumer | None], Component]


DurableState = Callable[[Mapping[str, Any], Callable[[str], str], str], dict[str, Any]]
"""``(settings, place, name) -> settings to replace``: see :attr:`Factory.durable_state`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Factory(Generic[C]):
    """Creates one kind of component from its typed configuration.

    ``default_config`` returns a fresh config dataclass; the loader overlays the user's YAML onto
    it (rejecting unknown keys) and then calls its ``validate()`` if it has one, which returns a
    list of problems as ``"key.path: message"`` relative to the component.
    ``create(settings, config, next_consumer)`` returns the component; ``next_consumer`` is None
    for exporters. ``create`` always hands the component a ``settings.telemetry`` scoped to the
    new instance, so ``settings.telemetry.count(name)`` counts ``<kind>.<id>.<name>``; only the
    ``counters`` declared here (and the pipeline's standard ones of the kind,
    :data:`STANDARD_COUNTERS`) may be counted.
    """

    type_name: str
    kind: str
    default_config: Callable[[], C]
    create: Callable[[CreateSettings, C, Consumer | None], Component]
    signals: frozenset[str] = frozenset({"traces", "logs", "evidence"})
    """Pipeline types the component may be used in."""
    counters: tuple[CounterSpec, ...] = ()
    """The counters the component counts (its own; see :data:`STANDARD_COUNTERS`)."""
    relay: Callable[[Mapping[str, str], Telemetry], Relay | None] | None = None
    """Exporters that can pass raw OTLP requests on: builds a :class:`Relay` to the
    destinations the ``OTEL_EXPORTER_OTLP_*`` variables of the given environment name (None
    when they name none). ``observe`` forwards the agent's own telemetry through it."""
    durable_state: DurableState | None = None
    """Components that keep state on disk across restarts (a journal, a persistent queue, a
    spill file): given the settings as a configuration file writes them, a function that names
    a file in a run directory, and the instance's name (``""`` for ``type`` alone), the
    settings that put that state there instead (empty when the file sets none). ``observe -c
    FILE`` applies them, so a standing collector's state is neither replayed into a run nor
    locked by it (:class:`DurableState`)."""

    def __post_init__(self) -> None:
        raw: _Create = self.create
        if getattr(raw, "__otel_bridge_factory__", None) is not None:
            return

        def create(settings: CreateSettings, config: Any, next_consumer: Consumer | None) -> Any:
            scope = settings.telemetry.scope
            if scope is None or (scope.kind, scope.id) != (self.kind, settings.id):
                settings = replace(
                    settings, telemetry=settings.telemetry.for_factory(self, settings.id)
                )
            return raw(settings, config, next_consumer)

        create.__otel_bridge_factory__ = self  # type: ignore[attr-defined]
        create.__wrapped__ = raw  # type: ignore[attr-defined]
        create.__doc__ = raw.__doc__
        object.__setattr__(self, "create", create)


STANDARD_COUNTERS: Mapping[str, tuple[CounterSpec, ...]] = {
    RECEIVER: (
        CounterSpec(
            "routed",
            "records the receiver handed to its pipelines, by part "
            "(spans, logs, observations, coverage)",
            labeled=True,
        ),
        CounterSpec("refused", "records the pipelines refused for now (retryable)"),
        CounterSpec("rejected", "records the pipelines rejected permanently (not retryable)"),
    ),
    EXPORTER: (
        CounterSpec("sent", "records the exporter accepted"),
        CounterSpec("failed", "records whose consume raised in the exporter"),
    ),
    PROCESSOR: (),
}
"""Counters the collector counts on every component's behalf, by kind."""

PIPELINE_COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("sent", "records the pipeline's first processor (or fan-out) accepted"),
    CounterSpec("failed", "records whose delivery into the pipeline raised"),
)
"""Counters of each pipeline (kind :data:`PIPELINE`, id the pipeline id)."""

COLLECTOR_COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("shutdown_errors", "components whose shutdown raised", unit="{components}"),
)
"""Counters of the collector itself (kind :data:`COLLECTOR`, id ``service``)."""


def declared_counters(factory: Factory[Any]) -> tuple[CounterSpec, ...]:
    """Every counter an instance made by ``factory`` may count: its own and the standard ones."""
    return (*factory.counters, *STANDARD_COUNTERS.get(factory.kind, ()))


# -- status protocol ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """An address a started component listens on."""

    protocol: str
    """``grpc`` or ``http`` (OTLP transports)."""
    host: str
    port: int

    @property
    def url(self) -> str:
        """``http://host:port`` (IPv6 hosts bracketed), what an OTLP client is given."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentStatus:
    """What a running component tells the commands (the run summary, ``run``'s banner).

    Every field is optional; a component fills what it has.
    """

    endpoints: tuple[Endpoint, ...] = ()
    """Bound listening endpoints, by protocol (receivers)."""
    backend: str = ""
    """The backend in use (the host receiver), ``""`` when none or not started."""
    detail: str = ""
    """One human-readable line: which backend runs and why, where an exporter writes."""
    storage: str = ""
    """Where an exporter keeps what it has not delivered across restarts (its persistent
    queue's directory), ``""`` when nowhere."""
    collections: Mapping[str, str] = field(default_factory=dict)
    """Per collection (process, file, network): ``state: backend: reason`` with every detail
    (the host receiver)."""
    briefs: Mapping[str, str] = field(default_factory=dict)
    """Per collection: ``state: backend: what observes it, what it misses`` in a few words
    (the run summary's one line per plane; :attr:`collections` has the detail)."""
    skipped: tuple[str, ...] = ()
    """Backends tried before the one in use and not used here, each ``name: why`` (the host
    receiver's ``auto``: ``linux: needs root ...``)."""
    outcomes: Mapping[str, int] = field(default_factory=dict)
    """Outcome counts (the correlate processor: bridges, exact links, skips by reason)."""
    notes: tuple[str, ...] = ()
    """What the component could not do, one plain sentence each, for the run's last lines
    (the correlate processor: each sender whose spans named no pid and that it could not link
    to its process, with the reason)."""

    def endpoint(self, protocol: str) -> Endpoint | None:
        """The first endpoint of ``protocol``, None when there is none."""
        return next((e for e in self.endpoints if e.protocol == protocol), None)


@runtime_checkable
class StatusReporter(Protocol):
    """A component that has something to tell the commands."""

    def status(self) -> ComponentStatus:
        """The current status; cheap, thread-safe, callable before start and after shutdown."""


class ForwardTap(Protocol):
    """Where a receiver hands each request it took, unchanged (``observe``'s forwarding)."""

    def forwards(self, signal: str) -> bool:
        """Whether requests of ``signal`` (``traces``, ``logs``, ``metrics``) are wanted."""

    def request(self, signal: str, protocol: str, body: bytes, records: int) -> None:
        """One request's body as the client sent it (decompressed), over ``protocol``
        (``grpc``, ``http/protobuf``, ``http/json``), holding ``records`` records (metrics:
        1, the request). Must not block."""


class Relay(ForwardTap, Protocol):
    """A :class:`ForwardTap` that sends what it is handed to the user's own destination
    (built by an exporter factory's ``relay``)."""

    def send_root_span(self, span: Any) -> None:
        """Forward one span the caller made (``observe``'s root span) with the traces."""

    def shutdown(self, timeout: float = ...) -> None:
        """Send what is queued within ``timeout`` seconds, count the rest as not sent."""

    def summary(self) -> dict[str, Any]:
        """What was forwarded where, for ``summary.json``."""


@runtime_checkable
class Forwarding(Protocol):
    """A receiver that can hand the requests it takes to a :class:`ForwardTap`."""

    def set_forward(self, tap: ForwardTap | None) -> None:
        """Hand every request to ``tap`` too."""


@runtime_checkable
class Preflight(Protocol):
    """A component that can tell, before anything of the collector starts, that its own start
    would fail (a receiver's port already taken): :meth:`otel_bridge.pipeline.Collector.start`
    asks each first, so such a failure leaves no file an exporter would have created."""

    def preflight(self) -> None:
        """Raise :class:`~otel_bridge.errors.StartupError` when :meth:`Component.start` would
        fail for a reason that can be seen now, without acquiring anything."""


@runtime_checkable
class RootSettable(Protocol):
    """A component that observes a process lineage whose root is set before start."""

    def set_root_pid(self, pid: int) -> None:
        """Observe the lineage rooted at ``pid`` (before start)."""


@runtime_checkable
class RootConfigured(Protocol):
    """A component configuration that can name the root of the process lineage it observes
    (the host receiver's ``root_pid``; 0: none named)."""

    root_pid: int


def status_of(component: object) -> ComponentStatus:
    """``component.status()`` when it reports one, else an empty status."""
    if isinstance(component, StatusReporter):
        return component.status()
    return ComponentStatus()


class BatchFunction(Protocol):
    """A pure processor step: a batch in, a batch out, or None to drop the batch."""

    def __call__(self, batch: Batch, /) -> Batch | None: ...


class FunctionProcessor:
    """Wraps a pure ``Batch -> Batch | None`` function as a processor.

    Most processors are pure functions (normalize, redact, grade). Empty results are not
    forwarded.
    """

    def __init__(self, fn: BatchFunction, next_consumer: Consumer) -> None:
        self._fn = fn
        self._next = next_consumer

    def start(self, host: Host) -> None:
        """Nothing to acquire."""

    def shutdown(self) -> None:
        """Nothing to flush."""

    def consume(self, batch: Batch) -> None:
        """Apply the function and forward a non-empty result."""
        out = self._fn(batch)
        if out is not None and len(out):
            self._next.consume(out)


def require_consumer(next_consumer: Consumer | None, type_name: str) -> Consumer:
    """The next consumer of a receiver or processor; a factory bug if it is missing."""
    if next_consumer is None:
        raise ValueError(f"{type_name}: a receiver or processor needs a next consumer")
    return next_consumer


_C_contra = TypeVar("_C_contra", contravariant=True)


class NamedProcessorClass(Protocol[_C_contra]):
    """A processor built from its config and next consumer, named after its instance."""

    def __call__(
        self, config: _C_contra, next_consumer: Consumer, /, *, name: str, telemetry: Telemetry
    ) -> Component: ...


def named_processor_create(
    cls: NamedProcessorClass[C],
) -> Callable[[CreateSettings, C, Consumer | None], Component]:
    """The factory ``create`` of ``cls``: the next consumer required, and the instance's name
    (``pipeline.id``, one instance per pipeline) and telemetry passed on."""

    def create(settings: CreateSettings, config: C, next_consumer: Consumer | None) -> Component:
        return cls(
            config,
            require_consumer(next_consumer, settings.id),
            name=settings.instance_name,
            telemetry=settings.telemetry,
        )

    return create
