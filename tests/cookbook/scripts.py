"""The CPU recipe's scripts as modules: they are files beside the recipe, not a package."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

CPU_RECIPE = Path(__file__).resolve().parents[2] / "cookbook" / "cpu_recipe"


def load_script(name: str) -> ModuleType:
    """``cookbook/cpu_recipe/<name>.py``, imported."""
    spec = importlib.util.spec_from_file_location(name, CPU_RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
