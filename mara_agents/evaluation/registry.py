"""Scheduler and agent specs: what a spec string names, and building it.

A *spec* names what to evaluate:

* ``NAME`` or ``NAME:key=value:key=value``: a scheduler from
  :data:`mara_agents.baselines.ALL_SCHEDULERS` or, for your own, the import path
  ``package.module.Class`` of a :class:`~mara_env.schedulers.Scheduler` subclass
  (constructor keyword arguments after the colons), run on the simulator directly (the
  fast path);
* ``PREFIX=ARG``: an env-driven agent made by the factory registered for ``PREFIX`` with
  :func:`register_agent_factory` (``mara=POLICY.pt`` is the learned policy; plain
  ``mara`` the shipped one).  The agent is an :class:`Agent` (``reset``, ``act_round``,
  ``slots_for``), driven round by round through ``mara_env.cluster_env.raw_env``;
  ``env=NAME`` drives a scheduler this way.

:func:`check_spec` fails fast, in the parent process and before any episode runs, on a
spec that cannot be built (unknown name, bad parameter, missing or broken policy file).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import types
import typing
from collections.abc import Callable
from typing import Any, Protocol

from mara_agents.planning.specs import parse_value
from mara_env.config import ClusterConfig
from mara_env.round_env import RoundAgent
from mara_env.schedulers import Scheduler, SchedulerAgent


class SpecError(ValueError):
    """A scheduler/agent spec names nothing known; the message lists what is known."""


class Agent(RoundAgent, Protocol):
    """An env-driven decision maker (a learned policy; a scheduler through
    :class:`~mara_env.schedulers.SchedulerAgent`): a
    :class:`~mara_env.round_env.RoundAgent` (``reset``, ``act_round``), which the episode
    loop :func:`mara_env.round_env.play_episode` drives one round at a time, that also
    sizes its env.

    :meth:`slots_for` sizes the env: the harness runs the agent's episodes in an env with
    that many slots; the workload of a seed does not depend on the slot count, so every
    scheduler still sees the same tasks.
    """

    def slots_for(self, num_nodes: int) -> int | None:
        """The slots to observe a cluster of ``num_nodes`` with (None: the config's)."""


AgentFactory = Callable[[str], Agent]
ArgCheck = Callable[[str], object]  # raises for an ARG that cannot be used
# a line to show before a run of ARG on a cluster of that config (None: nothing to say)
ArgNote = Callable[[str, ClusterConfig], "str | None"]
# prefix -> (factory, check, note), each a callable or "module:function" imported lazily
# (so it also works in workers started with the spawn method and costs nothing until used).
_AGENT_FACTORIES: dict[
    str, tuple[AgentFactory | str, ArgCheck | str | None, ArgNote | str | None]
] = {}


def register_agent_factory(
    prefix: str,
    factory: AgentFactory | str,
    check: ArgCheck | str | None = None,
    note: ArgNote | str | None = None,
) -> None:
    """Make ``PREFIX=ARG`` specs build agents with ``factory(ARG)``.

    ``factory`` is a callable or an import path ``"package.module:function"``; prefer
    the path form: it is resolved inside each worker process.  ``check(ARG)``, if given,
    runs in the parent before any episode and raises ``ValueError`` or ``OSError`` for an
    ``ARG`` the factory could not use (e.g. a missing file).  ``note(ARG, config)``, if
    given, returns a line the harness shows once before the episodes (such as a policy run
    outside the cluster sizes it was trained for), or None.
    """
    if not prefix.isidentifier():
        raise ValueError(f"agent prefix {prefix!r} must be an identifier")
    _AGENT_FACTORIES[prefix] = (factory, check, note)


def _function(ref: Callable | str) -> Callable:
    """A callable, or the one an import path ``"package.module:function"`` names."""
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


# plain ``mara`` is ``mara=`` (an empty ARG: the shipped policy)
ALIASES = {"mara": "mara="}


def expand_alias(spec: str) -> str:
    """A spec with aliases expanded (plain ``mara`` is the shipped policy)."""
    return ALIASES.get(spec, spec)


def is_agent_spec(spec: str) -> bool:
    """Whether ``spec`` is ``PREFIX=ARG`` (an env-driven agent), not a scheduler."""
    return "=" in spec.split(":")[0]


def known_specs() -> list[str]:
    """Scheduler names and agent prefixes (``PREFIX=...``) that specs may use."""
    from mara_agents.baselines import ALL_SCHEDULERS

    return [
        *ALL_SCHEDULERS,
        *BOUNDS,
        "package.module.SchedulerClass",
        *(f"{p}=..." for p in _AGENT_FACTORIES),
    ]


def _scheduler_class(name: str) -> type[Scheduler]:
    """A built-in scheduler by name, or ``package.module.Class`` imported (your own)."""
    from mara_agents.baselines import ALL_SCHEDULERS

    if name in ALL_SCHEDULERS:
        return ALL_SCHEDULERS[name]
    if "." not in name:
        raise SpecError(f"unknown scheduler {name!r}; known: {', '.join(known_specs())}")
    module, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise SpecError(
            f"scheduler {name!r}: cannot import module {module!r} ({exc}); is its directory "
            "on PYTHONPATH?"
        ) from None
    except AttributeError:
        raise SpecError(f"scheduler {name!r}: module {module!r} has no {attr!r}") from None
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise SpecError(f"scheduler {name!r} is not a subclass of mara_env.schedulers.Scheduler")
    return cls


# The annotations a spec's text can be checked against (and turned into), by name.
CHECKABLE = {int: "int", float: "float", str: "str", bool: "bool", type(None): "None"}
BOOLEANS = {"true": True, "false": False}


def _annotated_types(hint: Any) -> tuple[type, ...] | None:
    """The types ``hint`` (``int``, ``float | None``, ...) allows; None if it is not made of
    :data:`CHECKABLE` ones (such a value is passed on unchecked)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    allowed = typing.get_args(hint) if union else (hint,)
    return allowed if all(t in CHECKABLE for t in allowed) else None


def _typed_value(spec: str, key: str, text: str, hint: Any) -> Any:
    """``key``'s value from its ``text`` (an int, else a float, else the text), once it is
    of a type ``hint`` allows: an int passes for a float, text for a str, true/false for a
    bool."""
    value = parse_value(text)
    allowed = _annotated_types(hint)
    if allowed is None or type(value) in allowed or (type(value) is int and float in allowed):
        return value
    if str in allowed:
        return text
    if bool in allowed and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    expected = " or ".join(CHECKABLE[t] for t in allowed if t is not type(None))
    raise SpecError(f"scheduler spec {spec!r}: {key}={text!r}; expected {expected}")


def _scheduler_kwargs(
    spec: str, cls: type[Scheduler] | Callable, params: list[str], skip: int = 0
) -> dict[str, Any]:
    """The keyword arguments of ``spec``'s ``key=value`` parameters, each a parameter of
    ``cls``'s constructor (or of the function ``cls``, after its first ``skip``) and of the
    type it is annotated with."""
    signature = inspect.signature(cls)
    named = [
        n
        for n, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ][skip:]
    open_ended = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    try:
        hints = typing.get_type_hints(cls.__init__ if isinstance(cls, type) else cls)
    except (NameError, TypeError):  # an annotation that does not resolve here: not checked
        hints = {}
    name = cls.__name__
    kwargs = {}
    for p in params:
        key, eq, text = p.partition("=")
        if not eq:
            raise SpecError(f"scheduler spec {spec!r}: parameter {p!r} is not key=value")
        if key not in named and not open_ended:
            raise SpecError(
                f"scheduler spec {spec!r}: unknown parameter {key!r}; "
                f"known: {', '.join(named) or f'none ({name} takes no parameters)'}"
            )
        kwargs[key] = _typed_value(spec, key, text, hints.get(key))
    return kwargs


def make_scheduler(spec: str) -> Scheduler:
    """Build the scheduler named by ``NAME[:key=value...]``; ``NAME`` is a built-in
    scheduler or the import path ``package.module.Class`` of a :class:`Scheduler`
    subclass (imported in every worker process).  Each value is checked against the
    constructor's annotation first (:func:`_typed_value`)."""
    name, *params = spec.split(":")
    cls = _scheduler_class(name)
    kwargs = _scheduler_kwargs(spec, cls, params)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"scheduler spec {spec!r}: {exc}") from None


# Bound specs: an upper bound per episode that no scheduler's decisions produce (the
# clairvoyant bound), as "package.module:function" of (config, traces, seed, **params) ->
# metrics, imported when used.
BOUNDS = {"bound": "mara_agents.evaluation.bound:run_bound_episode"}
Bound = Callable[..., dict]


def is_bound_spec(spec: str) -> bool:
    """Whether ``spec`` names an upper bound (``bound[:key=value...]``), not a scheduler."""
    return spec.split(":")[0] in BOUNDS


def make_bound(spec: str) -> Bound:
    """The bound named by ``NAME[:key=value...]``: ``f(config, traces, seed) -> metrics``
    with the spec's parameters (checked as a scheduler's are) bound."""
    name, *params = spec.split(":")
    function = _function(BOUNDS[name])
    return functools.partial(function, **_scheduler_kwargs(spec, function, params, skip=3))


def _factory_of(
    prefix: str,
) -> tuple[AgentFactory | str, ArgCheck | str | None, ArgNote | str | None]:
    if prefix not in _AGENT_FACTORIES:
        raise SpecError(f"unknown agent prefix {prefix!r}; known: {', '.join(known_specs())}")
    return _AGENT_FACTORIES[prefix]


def make_agent(spec: str) -> Agent:
    """Build the env-driven agent named by ``PREFIX=ARG``."""
    prefix, _, arg = spec.partition("=")
    factory, _, _ = _factory_of(prefix)
    return _function(factory)(arg)


def spec_note(spec: str, config: ClusterConfig) -> str | None:
    """The line an agent spec's registered ``note`` has for a run on ``config`` (None for
    schedulers, references and agents without one)."""
    if is_bound_spec(spec) or not is_agent_spec(spec):
        return None
    prefix, _, arg = spec.partition("=")
    note = _factory_of(prefix)[2]
    return None if note is None else _function(note)(arg, config)


def check_spec(spec: str) -> None:
    """Raise :class:`SpecError` now (in the parent) for a spec that cannot be built."""
    if is_bound_spec(spec):
        make_bound(spec)
        return
    if not is_agent_spec(spec):
        make_scheduler(spec)
        return
    prefix, _, arg = spec.partition("=")
    _, check, _ = _factory_of(prefix)
    if check is None:
        return
    try:
        _function(check)(arg)
    except SpecError:
        raise
    except (ValueError, OSError) as exc:
        raise SpecError(f"{spec}: {exc}") from None


def spec_files(spec: str) -> list[str]:
    """The files ``spec`` reads that it names: an agent's argument or a parameter's value
    (``hedge:prior=FILE``, ``mara=POLICY.pt``) that is an existing file."""
    spec = expand_alias(spec)
    if is_agent_spec(spec):
        values = [spec.partition("=")[2]]
    else:
        values = [p.partition("=")[2] for p in spec.split(":")[1:]]
    return [v for v in values if v and os.path.isfile(v)]


def spec_key(spec: str) -> tuple:
    """What ``spec`` runs, as a comparable key: the scheduler or bound with every
    parameter's value (given, typed, or its default), or an agent's prefix and argument (a
    file's real path); two specs with the same key run the same thing."""
    spec = expand_alias(spec)
    if is_agent_spec(spec):
        prefix, _, arg = spec.partition("=")
        return (prefix, os.path.realpath(arg) if arg and os.path.exists(arg) else arg)
    name, *params = spec.split(":")
    if is_bound_spec(spec):
        function, skip = _function(BOUNDS[name]), 3
    else:
        function, skip = _scheduler_class(name), 0
    values = {
        n: p.default
        for n, p in list(inspect.signature(function).parameters.items())[skip:]
        if p.default is not p.empty
    }
    values.update(_scheduler_kwargs(spec, function, params, skip=skip))
    numbers = {k: float(v) for k, v in values.items() if type(v) in (int, float)}
    return (name, tuple(sorted((k, repr(v)) for k, v in {**values, **numbers}.items())))


def check_distinct(specs: list[str], option: str = "--schedulers") -> None:
    """Raise :class:`SpecError` naming two of ``specs`` that run the same thing."""
    seen: dict[tuple, str] = {}
    for spec in specs:
        key = spec_key(spec)
        if key in seen:
            raise SpecError(
                f"{option}: {spec!r} names the same scheduler as {seen[key]!r}; give each once"
            )
        seen[key] = spec


def _scheduler_agent(name: str) -> Agent:
    return SchedulerAgent(make_scheduler(name))


register_agent_factory("env", _scheduler_agent, check=make_scheduler)
# the learned policy: ``mara=POLICY.pt``, or plain ``mara`` for the shipped policy
register_agent_factory(
    "mara",
    "mara_agents.policy.agent:make_agent",
    check="mara_agents.policy.agent:check_policy",
    note="mara_agents.policy.agent:size_note",
)
