"""What a conformance scenario is (sans-I/O): a generator of :class:`Call` objects that receives
each decoded response, run once per version of the API under test against each broker.

    def metadata_known(ctx):
        resp = yield ctx.call(ApiKey.METADATA, topics=[{"name": ctx.topic("t")}])
        ...

A scenario never opens a socket: the runner (:mod:`kproto.conformance.runner`) drives the same
generator against the target and the reference broker and hands both transcripts to the comparer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Iterable, List, Mapping, Optional, Set, Tuple

from kproto.codecs import MessageCodec, Uuid, request

__all__ = ["Call", "Context", "Scenario", "ScenarioGen", "TopicSpec", "build", "api_name"]


#: Coordinator errors a client waits out: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
#: NOT_COORDINATOR.
TRANSIENT_COORDINATOR_ERRORS = frozenset({14, 15, 16})


def api_name(api_key: int) -> str:
    """``ProduceRequest`` -> ``Produce``."""
    name = request(api_key).name
    return name[:-len("Request")] if name.endswith("Request") else name


def _build_struct(codec: MessageCodec, cls_name: str, values: Mapping[str, Any], plan: Any) -> Any:
    cls: Any = codec.classes[cls_name]
    struct = cls._schema_struct
    by_attr = {f.attr: f for f in struct.fields} if struct is not None else {}
    present = None if plan is None else {f.attr: sub for f, _tagged, _default, sub in plan.entries}
    kwargs: Dict[str, Any] = {}
    for k, v in values.items():
        f = by_attr.get(k)
        if f is None:
            # a field of the same struct at other versions (its class is another one there)
            if k not in _all_attrs(codec):
                raise TypeError(f"{cls_name} has no field {k!r}")
            continue
        if present is not None and k not in present:
            continue  # not in this version: left at its default, as the encoder wants
        sub = None if present is None else present[k]
        if f.is_struct_type and v is not None:
            if f.is_array:
                v = [x if not isinstance(x, dict) else _build_struct(codec, f.element_type, x, sub) for x in v]
            elif isinstance(v, dict):
                v = _build_struct(codec, f.element_type, v, sub)
        kwargs[k] = v
    return cls(**kwargs)


def _all_attrs(codec: MessageCodec) -> Set[str]:
    structs = [getattr(c, "_schema_struct", None) for c in codec.classes.values()]
    return {f.attr for s in structs if s is not None for f in s.fields}


def build(api_key: int, version: Optional[int] = None, **fields: Any) -> Any:
    """A request object of ``api_key`` from plain values: nested structs as dicts (snake_case
    keys), fields left out at their schema defaults. Fields of every version may be given;
    with ``version``, those absent from it are dropped (the encoder refuses them)."""
    codec = request(api_key)
    plan = None if version is None else codec.json_plan(version)
    return _build_struct(codec, codec.name, fields, plan)


@dataclass
class Call:
    """One request of a scenario. ``compare``: the two brokers' answers are compared field by
    field (setup steps are not); ``view`` reduces the normalised answer to the part that is the
    scenario's own (e.g. its group in a ListGroups answer). ``expect_response`` False: Produce
    with acks=0, which has no answer. ``retry``: the call is sent again (a bounded number of
    times, 100 ms apart) while it says so of the answer, as clients do while a coordinator
    loads."""

    api_key: int
    version: int
    body: Any
    label: str = ""
    compare: bool = True
    expect_response: bool = True
    view: Optional[Callable[[Any], Any]] = None
    retry: Optional[Callable[[Any], bool]] = None


#: A scenario body: yields calls, receives each decoded response (None without one).
ScenarioGen = Generator[Call, Any, Any]


@dataclass(frozen=True)
class TopicSpec:
    """A topic a scenario needs before it starts, created through CreateTopics on both brokers."""

    suffix: str
    partitions: int = 1
    configs: Tuple[Tuple[str, str], ...] = ()


@dataclass
class Scenario:
    """A named sequence of requests exercising ``api_key``, run at every version both brokers
    advertise (within ``versions`` when given). ``needs_authorizer``: run only when both brokers
    have one (ACL scenarios)."""

    name: str
    api_key: int
    body: Callable[["Context"], ScenarioGen]
    topics: Tuple[TopicSpec, ...] = ()
    versions: Optional[range] = None
    needs_authorizer: bool = False
    doc: str = ""


@dataclass
class Context:
    """What a scenario sees of one run at one version against one broker: unique names, the
    broker's ids of the pre-created topics and the version to use of each helper API."""

    scenario: Scenario
    version: int
    prefix: str
    common: Mapping[int, range]
    topic_ids: Dict[str, Uuid] = field(default_factory=dict)
    node_id: int = -1
    #: the run's start (ms): record timestamps count from it, the same on both brokers
    t0: int = 0

    def topic(self, suffix: str) -> str:
        """The run-unique name of the scenario's topic ``suffix``."""
        return f"{self.prefix}-{suffix}"

    def group(self, suffix: str = "g") -> str:
        return f"{self.prefix}-{suffix}"

    def topic_id(self, suffix: str) -> Uuid:
        return self.topic_ids.get(self.topic(suffix), Uuid.ZERO)

    def top(self, api_key: int, within: Optional[range] = None) -> int:
        """The highest version of a helper API both brokers advertise (within ``within``)."""
        rng = self.common.get(api_key, range(0))
        if within is not None:
            rng = range(max(rng.start, within.start), min(rng.stop, within.stop))
        if not rng:
            raise MissingApi(api_key)
        return rng[-1]

    def call(self, api_key: int, *, version: Optional[int] = None, label: str = "",
             compare: Optional[bool] = None, view: Optional[Callable[[Any], Any]] = None,
             expect_response: bool = True, retry: Optional[Callable[[Any], bool]] = None,
             **fields: Any) -> Call:
        """A :class:`Call` of ``api_key``: at the version under test when it is the scenario's
        API (and then compared), else at the helper version :meth:`top` (not compared)."""
        own = api_key == self.scenario.api_key
        if version is None:
            version = self.version if own else self.top(api_key)
        return Call(api_key, version, build(api_key, version, **fields), label or api_name(api_key),
                    own if compare is None else compare, expect_response, view, retry)


class MissingApi(Exception):
    """A helper API the scenario needs is not advertised by both brokers: the scenario is skipped."""

    def __init__(self, api_key: int) -> None:
        super().__init__(f"needs {api_name(api_key)} (API key {api_key}) on both brokers")
        self.api_key = api_key


def scenario(api_key: int, *, topics: Iterable[TopicSpec] = (), versions: Optional[range] = None,
             needs_authorizer: bool = False, registry: Optional[List[Scenario]] = None,
             name: Optional[str] = None) -> Callable[[Callable[[Context], ScenarioGen]], Callable[[Context], ScenarioGen]]:
    """Decorator registering a scenario body in ``registry``; its name is ``api.function``."""
    def deco(fn: Callable[[Context], ScenarioGen]) -> Callable[[Context], ScenarioGen]:
        assert registry is not None
        registry.append(Scenario(name or f"{api_name(api_key)}.{fn.__name__}", api_key, fn,
                                 tuple(topics), versions, needs_authorizer, (fn.__doc__ or "").strip()))
        return fn
    return deco

