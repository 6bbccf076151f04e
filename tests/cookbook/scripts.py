"""The CPU recipe's scripts as modules: they are files beside the recipe, not a package."""

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

CPU_RECIPE = Path(__file__).resolve().parents[2] / "cookbook" / "cpu_recipe"
# The recipe imports its stages from beside it, as a script does from its own folder.
if str(CPU_RECIPE) not in sys.path:
    sys.path.insert(0, str(CPU_RECIPE))


def load_script(name: str) -> ModuleType:
    """``cookbook/cpu_recipe/<name>.py``, imported."""
    spec = importlib.util.spec_from_file_location(name, CPU_RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def stage_module(name: str) -> ModuleType:
    """``cookbook/cpu_recipe/<name>.py``, a stage module of the recipe: the very module the
    recipe imported (patch it there, and the recipe's calls see the patch)."""
    return importlib.import_module(name)


def labelled_click_button_step(folder: Path, adapters: tuple[str, ...]) -> object:
    """One step of a 4 x 1 independent team on a real click-button page (seed 5), traced into
    ``folder/traces`` and labelled by the verified critic into ``folder/labels.jsonl``. Agent
    "right" clicks the button the task names, "garbled" answers no action, the others click
    another button. Returns the episode's result."""
    from collabui import CollabAgentTeam
    from collabui.devices import make_env
    from collabui.models.fake import ScriptedChatModel
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces

    team = CollabAgentTeam(ScriptedChatModel(_one_agent_right), n_agents=4, rounds=1, topology="independent",
                           adapters=adapters, max_steps=1, seed=0)
    with make_env("miniwob/click-button") as env:
        result = team.run(None, env, seed=5, trace=folder / "traces", env_name="miniwob/click-button")
    critic = make_critic("verified")
    try:
        label_traces(folder / "traces", critic, folder / "labels.jsonl")
    finally:
        critic.close()
    return result


def _one_agent_right(req):
    if req.adapter == "garbled":
        return "I would rather not say."
    user = req.messages[-1]["content"]
    target = re.search(r'Click on the "(.+?)" button', user)[1]
    buttons = re.findall(r"<button\[(\w+)\]\| ([^>]*)>", user)
    pick = next(i for i, text in buttons if (text.strip() == target) == (req.adapter == "right"))
    return f'Action: {{"action": "click", "element_id": "{pick}"}}'
