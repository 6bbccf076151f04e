"""The CPU recipe's pictures: the headline rows of a results.json with their intervals, and the
minutes of a run's stages (its recipe.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipe_marl import ABLATIONS

from collabui.errors import ConfigError

#: The rows the issue names, in the plot's order (top to bottom): baselines, base model, trained
#: model, the MARL team and its ablations. A results.json's other rows are experiments.
HEADLINE_ROWS = ("random", "lexical", "base_single", "base_team", "trained_single", "trained_team",
                 "trained_team_unshuffled", "trained_team_marl", *ABLATIONS)


def plot(results: dict[str, Any], path: str | Path) -> list[str]:
    """The headline rows of a results.json as held-out success with 95% Wilson intervals (a
    forest plot written to ``path``), the issue's target (lexical + 15 points) and the 60% aim
    marked; returns the rows drawn.

    Raises:
        ConfigError: the results hold none of :data:`HEADLINE_ROWS`, or matplotlib is missing.
    """
    from collabui._plotting import figure, tidy

    rows = results.get("systems", {})
    names = [name for name in HEADLINE_ROWS if name in rows]
    if not names:
        raise ConfigError(f"no row to plot: results.json has none of {', '.join(HEADLINE_ROWS)}")
    with figure(path, figsize=(8, 1.6 + 0.4 * len(names))) as (_fig, ax):
        for y, name in enumerate(reversed(names)):
            row, colour = rows[name], _colour(name)
            rate, (low, high) = 100 * row["rate"], (100 * bound for bound in row["ci95"])
            ax.errorbar(rate, y, xerr=[[rate - low], [high - rate]], fmt="o", color=colour, capsize=3)
            ax.annotate(f"{row['successes']}/{row['episodes']}", (high, y), xytext=(5, 0),
                        textcoords="offset points", va="center", fontsize="small", color=colour)
        ax.set_yticks(range(len(names)), list(reversed(names)))
        if "lexical" in rows:
            ax.axvline(100 * rows["lexical"]["rate"] + 15, ls="--", color="grey", label="lexical + 15 points")
        ax.axvline(60, ls=":", color="tab:green", label="the 60% aim")
        ax.set_xlim(0, 100)
        ax.set_title("Held-out MiniWoB++ tasks, shuffled pages (cookbook/cpu_recipe/results.json)", fontsize="medium")
        tidy([ax], xlabel="success, % of episodes (95% Wilson interval)")
    return names


def _colour(name: str) -> str:
    """Baselines grey, the base model brown, the SFT model blue, MARL and its ablations purple."""
    if name in ("random", "lexical"):
        return "grey"
    if name.startswith("base_"):
        return "tab:brown"
    return "tab:purple" if name == "trained_team_marl" or name in ABLATIONS else "tab:blue"


#: A stage's kind by the number its name starts with (``_Clock`` names them "1 demonstrations",
#: "3 eval trained_team", ...), and the colour it is drawn in.
_KINDS = {"1": ("training", "tab:blue"), "2": ("training", "tab:blue"), "6": ("MARL", "tab:purple"),
          "3": ("held-out rows", "tab:orange"), "4": ("checks", "grey"), "5": ("checks", "grey")}


def plot_timeline(seconds: dict[str, float], path: str | Path) -> float:
    """The minutes of each stage of a run (``recipe.json``'s ``seconds``, in the order they ran)
    as bars coloured by kind, the total in the title; returns the total minutes.

    Raises:
        ConfigError: no stage has run yet, or matplotlib is missing.
    """
    from collabui._plotting import figure, tidy

    stages = [(name, sec / 60) for name, sec in seconds.items()]
    if not stages:
        raise ConfigError("no stage to draw: recipe.json records none yet")
    total = sum(minutes for _, minutes in stages)
    with figure(path, figsize=(8, 1.4 + 0.35 * len(stages))) as (_fig, ax):
        drawn: set[str] = set()
        for y, (name, minutes) in enumerate(reversed(stages)):
            kind, colour = _KINDS.get(name.split(" ", 1)[0], ("other", "black"))
            ax.barh(y, minutes, color=colour, label=None if kind in drawn else kind)
            drawn.add(kind)
            ax.annotate(f"{minutes:.1f}", (minutes, y), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize="small")
        ax.set_yticks(range(len(stages)), [name for name, _ in reversed(stages)])
        ax.set_title(f"The run's stages: {total:.0f} min in all ({total / 60:.1f} h)", fontsize="medium")
        tidy([ax], xlabel="minutes")
    return total
