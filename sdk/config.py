"""Team configuration: one keyword-only dataclass that drives both the API and the CLI."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from collabui.actions import get_action_space
from collabui.devices.simplify import ELEMENT_FORMATS
from collabui.errors import ConfigError
from collabui.prompts import PROMPT_STYLES

__all__ = ["TeamConfig", "DEFAULT_TEMPERATURES", "PROMPT_STYLE_CHOICES", "ELEMENT_FORMAT_CHOICES",
           "MODEL_HELP", "GUIDED_HELP", "ELEMENT_FORMAT_HELP", "SHUFFLE_HELP", "SCREENSHOTS_HELP"]

#: What ``prompt_style`` accepts: a style, or ``auto`` (the model's own, else ``react``).
PROMPT_STYLE_CHOICES = ("auto", *PROMPT_STYLES)
#: What ``element_format`` accepts: a page format, or ``auto`` (the one a trained model learned).
ELEMENT_FORMAT_CHOICES = ("auto", *ELEMENT_FORMATS)

# Help texts of settings that several configs share (their flags mean the same everywhere).
MODEL_HELP = ("model spec: smollm2 | smollm2-trained | trained:FOLDER | hf:PATH | openai:MODEL@URL | "
              "random[:SEED] | lexical")
GUIDED_HELP = ("constrain answers to the action space's JSON schema (vLLM structured outputs on "
               "openai: servers, llguidance for local models); baselines ignore it")
ELEMENT_FORMAT_HELP = ("page text: html (<button[B]| Ok>) or text-first (one line per item, "
                       'button "Ok" [B]; fewer tokens); default auto: what a trained model '
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
    action_space: str = field(default="web", metadata={"help": "web or mobile", "choices": ("web", "mobile")})
    max_steps: int = field(default=10, metadata={"help": "environment steps per episode"})
    prompt_style: str = field(
        default="auto",
        metadata={"help": "agents' prompt; auto: the style the model was trained for (trained teams), "
                  "else react", "choices": PROMPT_STYLE_CHOICES},
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
        if self.prompt_style not in PROMPT_STYLE_CHOICES:
            raise ConfigError(f"prompt_style {self.prompt_style!r} is unknown; use one of {list(PROMPT_STYLE_CHOICES)}")
        if self.temperatures is not None:
            temps = tuple(float(t) for t in self.temperatures)
            if len(temps) != self.n_agents:
                raise ConfigError(
                    f"temperatures has {len(temps)} values for {self.n_agents} agents; give one per agent"
                )
            if any(t < 0 for t in temps):
                raise ConfigError(f"temperatures must be >= 0, got {list(temps)}")
            object.__setattr__(self, "temperatures", temps)
        if self.adapters is not None:
            adapters = tuple(self.adapters)
            if len(adapters) != self.n_agents:
                raise ConfigError(
                    f"adapters has {len(adapters)} names for {self.n_agents} agents; give one per agent (None for the base model)"
                )
            object.__setattr__(self, "adapters", adapters)

    def for_model(self, model: Any) -> TeamConfig:
        """This config with ``auto`` settings resolved for ``model``: its trained prompt style
        (``react`` for untrained models) and, when no adapters are named, its per-agent adapters
        (cycled over the agents)."""
        defaults = getattr(model, "team_defaults", None) or {}
        changes: dict[str, Any] = {}
        if self.prompt_style == "auto":
            changes["prompt_style"] = defaults.get("prompt_style", "react")
        shipped = tuple(defaults.get("adapters") or ())
        if self.adapters is None and shipped:
            changes["adapters"] = tuple(shipped[i % len(shipped)] for i in range(self.n_agents))
        if not changes:
            return self
        from dataclasses import replace

        return replace(self, **changes)

    def agent_temperature(self, i: int) -> float:
        temps = self.temperatures or DEFAULT_TEMPERATURES
        return temps[i % len(temps)]

    def agent_adapter(self, i: int) -> str | None:
        return self.adapters[i] if self.adapters else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for traces (the topology as its name or its own dict)."""
        data = asdict(self)
        topo = self.topology
        data["topology"] = topo if isinstance(topo, str) else topo.to_dict()
        data["temperatures"] = [self.agent_temperature(i) for i in range(self.n_agents)]
        data["adapters"] = [self.agent_adapter(i) for i in range(self.n_agents)]
        return data
