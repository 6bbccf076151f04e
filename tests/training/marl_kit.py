"""Shared MARL test kit: a real LocalModel whose answers are replaced by a correct action, FakeDevices,
and a small config (imported by test_marl and test_run_report)."""

import dataclasses

from collabui.actions.web import Click
from collabui.config import TeamConfig
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.models.base import ChatModel
from collabui.training.marl import MARLConfig, run_marl

TEAM_FIELDS = {f.name for f in dataclasses.fields(TeamConfig)}

__all__ = ["OK", "GOLD", "ScriptedOverLocal", "factories", "new_log", "small_config", "run_small"]

OK = 'Thought: OK is B.\nAction: {"action": "click", "element_id": "B"}'
GOLD = {"action": "click", "element_id": "B"}


class ScriptedOverLocal(ChatModel):
    """Runs the real LocalModel (adapters and all), then answers with a fixed correct action,
    so episodes succeed and the reference critic rewards entries."""

    def __init__(self, local, log):
        self.local, self.log, self.name = local, log, "scripted-over-local"

    def generate(self, requests):
        results = self.local.generate(requests)
        self.log["requests"] += len(requests)
        self.log["adapters"].update(r.adapter for r in requests)
        return [dataclasses.replace(r, text=OK) for r in results]

    def close(self):
        self.log["events"].append("close")
        self.local.close()


def factories(log):
    def model_factory(base_dir, adapters):
        from collabui.models.local import LocalModel

        log["loads"].append(sorted(adapters))
        log["events"].append("load")
        return ScriptedOverLocal(LocalModel(base_dir, adapters=dict(adapters)), log)

    def env_factory(name):
        log["envs"].append(name)
        screen = Observation(text="<button[B]| OK> <button[C]| Cancel>", task="Click OK.",
                             extra={"gold_action": GOLD})
        return FakeDevice([screen], success_when=lambda a: a == Click("B"))

    return model_factory, env_factory


def new_log():
    return {"requests": 0, "adapters": set(), "loads": [], "envs": [], "events": []}


def small_config(base_dir, out, **kw):
    """A tiny MARL run; ``kw`` naming TeamConfig fields (n_agents, seed...) go to its team."""
    team = {"n_agents": 2, "rounds": 1, "max_steps": 1, "max_new_tokens": 4, "prompt_style": "react",
            **{k: kw.pop(k) for k in list(kw) if k in TEAM_FIELDS}}
    values = dict(model=f"hf:{base_dir}", train_tasks=("task-a",), eval_tasks=("task-b",), episodes_per_task=1,
                  eval_episodes_per_task=1, iterations=1, team=TeamConfig(**team),
                  critic="reference", out_dir=str(out), dpo={"max_steps": 1, "per_device_train_batch_size": 1})
    values.update(kw)
    return MARLConfig(**values)


def run_small(config, log, **kw):
    model_factory, env_factory = factories(log)
    return run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory, **kw)
