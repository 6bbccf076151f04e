"""Team configuration: one keyword-only dataclass that drives both the API and the CLI."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from collabui.actions import get_action_space
from collabui.devices.simplify import ELEMENT_FORMATS
from collabui.errors import ConfigError
from collabui.prompts import PROMPT_STYLES
from collabui.vote import TIE_BREAKS, VOTE_RULES

__all__ = ["TeamConfig", "config_to_dict", "config_from_dict", "pin_action_space", "DEFAULT_TEMPERATURES",
           "PROMPT_STYLE_CHOICES", "ELEMENT_FORMAT_CHOICES", "MODEL_HELP", "GUIDED_HELP", "ELEMENT_FORMAT_HELP",
           "SHUFFLE_HELP", "SCREENSHOTS_HELP"]

#: What ``prompt_style`` accepts: a style, or ``auto`` (the model's own, else ``react``).
PROMPT_STYLE_CHOICES = ("auto", *PROMPT_STYLES)
#: What ``element_format`` accepts: a page format, or ``auto`` (the one a trained model learned).
ELEMENT_FORMAT_CHOICES = ("auto", *ELEMENT_FORMATS)

# Help texts of settings that several configs share (their flags mean the same everywhere).
MODEL_HELP = ("model spec: smollm2 | smollm2-trained | trained:FOLDER | hf:PATH | openai:MODEL@URL | "
              "random[:SEED] | lexical")
GUIDED_HELP = ("constrain answers to the action space's JSON schema (vLLM structured outputs on "
               "openai: servers, llguidance for local models); baselines ignore it")
ELEMENT_FORMAT_HELP = ("page text: html (<button[B]| Ok>), text-first (one line per item, "
                       'button "Ok" [B]; fewer tokens), text-first-ordinal (like fields also read their '
                       'place on the screen, input "" 2nd [X]) or text-first-typed (a password, email or number box '
                       'reads its type as its tag, password ""); default auto: what a trained model '
                       "(smollm2-trained, trained:FOLDER) learned, else html")
#: ``--screenshots/--no-screenshots`` of ``collabui run`` and ``eval``, where they are on by default.
SCREENSHOTS_HELP = ("save a small screenshot per step beside the trace, for collabui view "
                    "(default on; --no-screenshots turns it off)")
SHUFFLE_HELP = ("shuffle sibling elements and draw element ids at random (seeded by the episode), "
                "so no policy wins by position habits")

#: Rollout temperatures of the four agents in the paper (App. C.3.2): diverse agents make the
#: vote and the preference data informative.
DEFAULT_TEMPERATURES = (0.1, 0.3, 0.5, 0.8)


@dataclass(frozen=True, kw_only=True)
class TeamConfig:
    """How a CollabAgentTeam is shaped and how it runs.

    Agents and rounds are numbered from 0 in the API and in traces.
    """

    n_agents: int = field(default=4, metadata={"help": "number of agents n"})
    rounds: int = field(default=3, metadata={"help": "conversation rounds m per step"})
    topology: Any = field(
        default="random",
        metadata={"help": "message DAG: random, chain, star, layered, complete, independent, "
                  "edges:0-1,1-2 or a Topology"},
    )
    seed: int | None = field(default=0, metadata={"help": "seed of the random DAG and of sampling"})
    temperatures: tuple[float, ...] | None = field(
        default=None,
        metadata={"help": "per-agent sampling temperatures (default 0.1,0.3,0.5,0.8, cycled)"},
    )
    adapters: tuple[str | None, ...] | None = field(
        default=None, metadata={"help": "per-agent names of the adapters the model serves (none = base model)"}
    )
    agent_styles: tuple[str, ...] | None = field(
        default=None, metadata={"help": "per-agent prompt styles (default: prompt_style for every agent)"}
    )
    agent_formats: tuple[str, ...] | None = field(
        default=None, metadata={"help": "per-agent page formats, html or text-first, each agent reading the "
                                "page re-rendered from the device's element tree (default: the device's)"}
    )
    varied_order: bool = field(
        default=False,
        metadata={"help": "every agent but agent 0 reads the page with its elements in an order of its own "
                  "(runs of sibling elements reordered, the same ids; drawn per page and agent), so mistakes "
                  "that follow the order stop coinciding (pages with an element tree)"},
    )
    action_space: str = field(default="web", metadata={"help": "web or mobile", "choices": ("web", "mobile")})
    max_steps: int = field(default=10, metadata={"help": "environment steps per episode"})
    prompt_style: str = field(
        default="auto",
        metadata={"help": "agents' prompt; auto: the style the model was trained for (trained teams), "
                  "else react", "choices": PROMPT_STYLE_CHOICES},
    )
    vote: str = field(
        default="exact",
        metadata={"help": "vote rule: exact (the paper's: identical actions pool their votes) or target "
                  "(first the most-proposed action on an element, then its most-proposed wording)",
                  "choices": VOTE_RULES},
    )
    tie_break: str = field(
        default="lowest-id",
        metadata={"help": "how a tie the last-round count leaves is broken: lowest-id (the latest round's lowest "
                  "agent id) or independent (first the action more proposals of the DAG's sources name: agents "
                  "that read no peer, so their entries are not copies)", "choices": TIE_BREAKS},
    )
    arbiter: str | None = field(
        default=None,
        metadata={"help": "model spec of a policy that answers each step alone (the page, task and history, no "
                  "peers); when its action is among the agents' proposals it is executed, else the vote's "
                  "(e.g. lexical: the team proposes, the heuristic picks among the proposals)"},
    )
    memory: bool = field(
        default=True,
        metadata={"help": "agents read their own answer of the previous round (the paper's one-round memory); "
                  "--no-memory: every round's proposals are fresh draws from the page and the peers"},
    )
    stop_when_decided: bool = field(
        default=False,
        metadata={"help": "skip a step's remaining agent calls once no answer they could give changes the vote's "
                  "winner (the same action, fewer calls; the trace marks the skipped entries, which training "
                  "cannot label); not with --arbiter"},
    )
    skip_stale: bool = field(
        default=False,
        metadata={"help": "when the vote's winner repeats the last executed action and that action left the page "
                  "unchanged, execute the most-voted other proposal instead (a field typed into again, a button "
                  "that does nothing: loops a retry cannot leave); the trace's vote names it passed_over"},
    )
    max_new_tokens: int = field(default=64, metadata={"help": "generation budget per agent call"})
    max_observation_chars: int = field(default=6000, metadata={"help": "observation text cap"})
    batch_fallback_s: float = field(
        default=5.0, metadata={"help": "flush a partial superstep batch after this many seconds"}
    )
    screenshots: bool = field(
        default=False,
        metadata={"help": "save a screenshot per step beside the trace (shown by collabui view); the "
                  "command line passes it to the device (in Python: make_env(..., screenshots=True)); "
                  "collabui run and eval default to on"},
    )

    def __post_init__(self) -> None:
        for name in ("n_agents", "rounds", "max_steps", "max_new_tokens", "max_observation_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        get_action_space(self.action_space)
        if self.vote not in VOTE_RULES:
            raise ConfigError(f"vote {self.vote!r} is unknown; use one of {list(VOTE_RULES)}")
        if self.tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break {self.tie_break!r} is unknown; use one of {list(TIE_BREAKS)}")
        if self.prompt_style not in PROMPT_STYLE_CHOICES:
            raise ConfigError(f"prompt_style {self.prompt_style!r} is unknown; use one of {list(PROMPT_STYLE_CHOICES)}")
        if self.arbiter is not None and (not isinstance(self.arbiter, str) or not self.arbiter.strip()):
            raise ConfigError(f"arbiter must be a model spec such as 'lexical', got {self.arbiter!r}")
        if self.arbiter is not None and self.stop_when_decided:
            raise ConfigError("stop_when_decided and an arbiter do not combine: the arbiter chooses among every "
                              "entry of the matrix; drop --stop-when-decided or --arbiter")
        if self.temperatures is not None:
            temps = tuple(float(t) for t in self.temperatures)
            if len(temps) != self.n_agents:
                raise ConfigError(
                    f"temperatures has {len(temps)} values for {self.n_agents} agents; give one per agent"
                )
            if any(t < 0 for t in temps):
                raise ConfigError(f"temperatures must be >= 0, got {list(temps)}")
            object.__setattr__(self, "temperatures", temps)
        for name, allowed in (("agent_styles", PROMPT_STYLES), ("agent_formats", ELEMENT_FORMATS)):
            self._check_per_agent(name, allowed)
        if self.adapters is not None:
            adapters = tuple(self.adapters)
            if len(adapters) != self.n_agents:
                raise ConfigError(
                    f"adapters has {len(adapters)} names for {self.n_agents} agents; give one per agent (None for the base model)"
                )
            object.__setattr__(self, "adapters", adapters)

    def _check_per_agent(self, name: str, allowed: tuple[str, ...]) -> None:
        values = getattr(self, name)
        if values is None:
            return
        values = tuple(values)
        if len(values) != self.n_agents:
            raise ConfigError(f"{name} has {len(values)} values for {self.n_agents} agents; give one per agent")
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise ConfigError(f"{name} has unknown values {unknown}; use {list(allowed)}")
        object.__setattr__(self, name, values)

    def for_model(self, model: Any) -> TeamConfig:
        """This config with ``auto`` settings resolved for ``model``: its trained prompt style
        (``react`` for untrained models), when no adapters are named its per-agent adapters
        (cycled over the agents) and likewise its per-agent prompt styles and page formats (a
        bundle of different models), and for the default ``random`` topology the DAG its agents
        were trained in (a MARL-trained bundle records it; used by a team of that size)."""
        defaults = getattr(model, "team_defaults", None) or {}
        changes: dict[str, Any] = {}
        if self.prompt_style == "auto":
            changes["prompt_style"] = defaults.get("prompt_style", "react")
        trained_for = len(defaults.get("adapters") or ())  # a MARL bundle has one slot per agent
        if self.topology == "random" and defaults.get("topology") and trained_for == self.n_agents:
            changes["topology"] = defaults["topology"]
        shipped = tuple(defaults.get("adapters") or ())
        if self.adapters is None and shipped:
            changes["adapters"] = tuple(shipped[i % len(shipped)] for i in range(self.n_agents))
        for name in ("agent_styles", "agent_formats"):  # a mixed bundle's agents, cycled like its adapters
            if getattr(self, name) is None and defaults.get(name):
                changes[name] = tuple(defaults[name][i % len(defaults[name])] for i in range(self.n_agents))
        if not changes:
            return self
        from dataclasses import replace

        return replace(self, **changes)

    def agent_temperature(self, i: int) -> float:
        temps = self.temperatures or DEFAULT_TEMPERATURES
        return temps[i % len(temps)]

    def agent_adapter(self, i: int) -> str | None:
        return self.adapters[i] if self.adapters else None

    def agent_style(self, i: int) -> str:
        """Agent ``i``'s prompt style (``prompt_style`` unless ``agent_styles`` sets it)."""
        return self.agent_styles[i] if self.agent_styles else self.prompt_style

    def agent_format(self, i: int) -> str | None:
        """Agent ``i``'s page format, or None: the page as the device rendered it."""
        return self.agent_formats[i] if self.agent_formats else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form of the fields as set (None stays None, a Topology object becomes its own
        dict): :meth:`from_dict` gives back an equal config. Traces record :meth:`trace_dict`."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TeamConfig:
        """The config of :meth:`to_dict` (lists back to tuples, a topology dict back to its
        Topology). Raises ConfigError on unknown fields or invalid values."""
        return config_from_dict(cls, data)

    def trace_dict(self) -> dict[str, Any]:
        """JSON form for traces: the effective per-agent temperatures and adapters (defaults
        applied), the topology as its name or its own dict."""
        data = asdict(self)
        topo = self.topology
        data["topology"] = topo if isinstance(topo, str) else topo.to_dict()
        data["temperatures"] = [self.agent_temperature(i) for i in range(self.n_agents)]
        data["adapters"] = [self.agent_adapter(i) for i in range(self.n_agents)]
        return data


def pin_action_space(team: TeamConfig, action_space: str, reason: str) -> TeamConfig:
    """``team`` with the action space an environment dictates (configs whose env decides it:
    ``mobile`` of an evaluation, ``env`` of a MARL run). The default ``web`` is replaced; another
    explicit value would silently be ignored, so it is refused with ``reason`` (the fix)."""
    if team.action_space == action_space:
        return team
    if team.action_space != "web":
        raise ConfigError(f"team.action_space {team.action_space!r} contradicts {reason}")
    return dataclasses.replace(team, action_space=action_space)


# -- JSON form of config dataclasses -----------------------------------------------------------


def _json_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict() if hasattr(value, "to_dict") else config_to_dict(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if not isinstance(value, str | int | float | bool | type(None)) and callable(getattr(value, "to_dict", None)):
        return value.to_dict()  # a Topology object
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    """The fields of a config dataclass as JSON values: nested configs as their dicts, tuples as
    lists, objects with ``to_dict`` (a Topology) as their dict. :func:`config_from_dict` reverses it."""
    return {f.name: _json_value(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}


def _from_json(tp: Any, value: Any) -> Any:
    """``value`` read back as type ``tp``: nested configs rebuilt, lists of tuple fields as tuples."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        nested = [a for a in options if dataclasses.is_dataclass(a)]
        if nested and isinstance(value, Mapping):
            return _from_json(nested[0], value)
        return _from_json(options[0], value) if len(options) == 1 else value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        reader = getattr(tp, "from_dict", None)
        return reader(value) if callable(reader) else config_from_dict(tp, value)
    if origin is tuple and isinstance(value, list):
        args = typing.get_args(tp)
        return tuple(_from_json(args[0] if args else Any, v) for v in value)
    if tp is Any and isinstance(value, Mapping) and "kind" in value and "edges" in value:
        from collabui.topologies import Topology  # the JSON form of a Topology object

        return Topology.from_dict(value)
    return value


def config_from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """A config dataclass ``cls`` from its :func:`config_to_dict` form. Fields missing from
    ``data`` take their defaults (a config saved before a field existed still loads).

    Raises:
        ConfigError: ``data`` is not a mapping, names fields ``cls`` does not have, or holds
            invalid values (the config's own checks).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"a {cls.__name__} is stored as a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{cls.__name__} has no field(s) {unknown}; was it saved by a newer "
                          "collabui? Remove them or upgrade")
    try:
        return cls(**{name: _from_json(hints[name], value) for name, value in data.items()})
    except TypeError as exc:  # a value of the wrong shape (a list where a mapping belongs, ...)
        raise ConfigError(f"stored {cls.__name__} is invalid: {exc}") from None
