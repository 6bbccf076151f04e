"""Approval before irreversible actions: what is flagged, the interrupt in the step graph, and
what a granted, refused or unasked action does to the episode and its trace."""

from __future__ import annotations

import io
import re

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from collabui import CollabAgentTeam
from collabui.actions import get_action_space
from collabui.approval import (
    ApprovalRequest,
    approval_context,
    ask_terminal,
    flag_action,
    resolve_policy,
)
from collabui.devices import make_env
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace

WEB = get_action_space("web")
MOBILE = get_action_space("mobile")
PAGE = "<button[A]| Cancel> <button[B]| Submit order> <input[C]| password>"


def _web(**action):
    return WEB.from_dict(action)


def test_flagged_actions():
    obs = Observation(text=PAGE, url="https://shop.example/cart", extra={"password_fields": ["C"]})
    assert flag_action(_web(action="click", element_id="B"), obs) == 'click on "Submit order" (submit)'
    assert flag_action(_web(action="click", element_id="A"), obs) is None
    assert flag_action(_web(action="type_string", element_id="C", content="pw"), obs) == "typing into a password field"
    assert flag_action(_web(action="type_string", element_id="A", content="x"), obs) is None
    assert flag_action(_web(action="jump_to", url="https://evil.example/x"), obs) == "navigation to another site (evil.example)"
    assert flag_action(_web(action="jump_to", url="https://www.shop.example/other"), obs) is None
    phone = Observation(text='0: Button "Install" (clickable) [0,0][10,10]\n1: Button "Open" (clickable) [0,0][1,1]')
    assert flag_action(MOBILE.from_dict({"action": "click", "index": 0}), phone) == 'click on "Install" (install)'
    assert flag_action(MOBILE.from_dict({"action": "click", "index": 1}), phone) is None
    # Whole words only: "Facebook" is no booking, "Postcode" no post.
    words = Observation(text="<a[A]| Facebook> <button[B]| Postcode lookup> <button[C]| Delete account>")
    assert [flag_action(_web(action="click", element_id=e), words) is not None for e in "ABC"] == [False, False, True]


def test_policy_choices_and_defaults():
    from collabui.devices.android import AndroidDevice
    from collabui.devices.browser import BrowserDevice
    from collabui.devices.miniwob import MiniWoBEnv
    from collabui.devices.mobile_miniwob import MiniWoBMobileEnv

    # The class decides (instances made without starting a browser or a phone).
    assert [resolve_policy(None, object.__new__(cls)) for cls in (BrowserDevice, AndroidDevice)] == ["ask", "ask"]
    assert [resolve_policy(None, object.__new__(cls)) for cls in (MiniWoBEnv, MiniWoBMobileEnv)] == [None, None]
    assert resolve_policy(None, FakeDevice(["<div| x>"], task="t")) is None  # never asks
    assert resolve_policy("never", None) == "never"
    with pytest.raises(ConfigError, match="approve must be one of"):
        resolve_policy("sometimes", None)


def test_ask_on_a_terminal_and_without_one():
    request = ApprovalRequest(0, {"action": "click", "element_id": "B"}, "click('B')", "click on \"Pay\" (pay)")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = io.StringIO()
    assert ask_terminal(request, stdin=Tty("y\n"), stderr=err) is True
    assert "approve step 0: click('B') - click on \"Pay\" (pay)? [y/N]" in err.getvalue()
    assert ask_terminal(request, stdin=Tty("\n"), stderr=io.StringIO()) is False  # N is the default
    err = io.StringIO()
    assert ask_terminal(request, stdin=io.StringIO("y\n"), stderr=err) is False
    assert "stdin is not a terminal: refused; pass --approve always|never" in err.getvalue()


def _clicker(request: ChatRequest) -> str:
    return 'Action: {"action": "click", "element_id": "B"}'


def test_the_approve_node_interrupts_and_resumes_with_command():
    """The real LangGraph mechanics: the step graph stops at interrupt() with the request and
    goes on with Command(resume=...)."""
    team = CollabAgentTeam(ScriptedChatModel(_clicker), n_agents=2, rounds=2, topology="chain")
    graph = team.compile_step_graph(checkpointer=InMemorySaver(), approval=True)
    obs = Observation(text=PAGE, task="Submit")
    inputs = {**team._inputs("Submit", obs, [], 0), "approval_context": approval_context(obs)}
    config = {"configurable": {"thread_id": "x"}}
    out = graph.invoke(inputs, config)
    [pending] = out["__interrupt__"]
    assert pending.value == {"t": 0, "action": {"action": "click", "element_id": "B"}, "call": "click('B')",
                             "reason": 'click on "Submit order" (submit)'}
    assert graph.get_state(config).next == ("approve",)
    done = graph.invoke(Command(resume={"approved": False, "by": "test"}), config)
    assert done["approval"]["decision"] == "refused" and done["approval"]["by"] == "test"
    assert "approve" in team.compile_step_graph(approval=True).get_graph().nodes
    assert "approve" not in team.graph.get_graph().nodes  # no policy, no gate


def _device() -> FakeDevice:
    return FakeDevice([PAGE, "<div| Thank you>"], task="Submit the order",
                      success_when=lambda a: a == _web(action="click", element_id="B"))


def test_refused_action_is_not_run_and_the_agents_read_why(tmp_path):
    asked: list[ApprovalRequest] = []
    model = ScriptedChatModel(_clicker)
    team = CollabAgentTeam(model, n_agents=2, rounds=1, topology="independent", max_steps=2)
    device = _device()
    result = team.run(None, device, trace=tmp_path, approve=lambda r: asked.append(r) or False)
    assert device.actions == [] and not result.success and result.n_steps == 2
    assert [r.t for r in asked] == [0, 1] and asked[0].reason == 'click on "Submit order" (submit)'
    error = result.steps[1].observation.last_action_error
    assert error == "click('B') was not run: the approval policy refused it (click on \"Submit order\" (submit))"
    assert any(f"Last action failed: {error}" in str(m["content"]) for r in model.requests for m in r.messages)
    trace = read_trace(result.trace_path)
    approval = trace.steps[0]["info"]["approval"]
    assert approval["decision"] == "refused" and approval["by"] == "callable" and approval["call"] == "click('B')"


def test_granted_action_runs_and_is_recorded(tmp_path):
    team = CollabAgentTeam(ScriptedChatModel(_clicker), n_agents=2, rounds=1, topology="independent", max_steps=2)
    device = _device()
    result = team.run(None, device, trace=tmp_path, approve="always")
    assert result.success and device.actions == [_web(action="click", element_id="B")]
    assert read_trace(result.trace_path).steps[0]["info"]["approval"]["decision"] == "approved"


def test_streamed_and_async_episodes_are_gated_too(tmp_path):
    import asyncio

    team = CollabAgentTeam(ScriptedChatModel(_clicker), n_agents=1, rounds=1, max_steps=1)
    device = _device()
    with team.stream(None, device, approve="never") as events:
        kinds = [e.kind for e in events]
    assert device.actions == [] and kinds[-1] == "episode_end" and "executed" in kinds
    result = asyncio.run(team.arun(None, _device(), approve="always"))
    assert result.success and result.steps[0].team_step.approval["decision"] == "approved"


def _form_filler(request: ChatRequest) -> str:
    """Type the task's quoted word into the empty fields, then press the button."""
    text = str(request.messages[-1]["content"])
    word = re.findall(r'"([^"]+)"', re.search(r"^Task: (.*)$", text, re.M).group(1))[-1]
    page = next(line for line in text.splitlines() if line.startswith("<"))
    for element, content in re.findall(r"<input\[([A-Z]+)\]\| ([^>]*)>", page):
        if content in ("", "password"):
            return f'Action: {{"action": "type_string", "element_id": "{element}", "content": "{word}"}}'
    button = re.findall(r"<button\[([A-Z]+)\]\|", page)[-1]
    return f'Action: {{"action": "click", "element_id": "{button}"}}'


@pytest.mark.browser
def test_miniwob_never_asks_unless_told(tmp_path, monkeypatch):
    """Real Chromium, MiniWoB++ enter-password: by default nothing is asked (the episode
    succeeds, no step records an approval); with a policy, the password typing and the submit
    click are asked about, and refusing the submit leaves the task undone."""
    calls: list[ApprovalRequest] = []
    monkeypatch.setattr("collabui.approval.ask_terminal", lambda r, **k: calls.append(r) or False)
    team = CollabAgentTeam(ScriptedChatModel(_form_filler), n_agents=1, rounds=1, max_steps=4, seed=0)
    with make_env("miniwob/enter-password") as env:
        result = team.run(None, env, seed=3, trace=tmp_path)
        assert result.success and calls == []
        assert all("approval" not in s["info"] for s in read_trace(result.trace_path).steps)

        asked: list[str] = []

        def policy(request: ApprovalRequest) -> bool:
            asked.append(request.reason)
            return request.reason == "typing into a password field"

        refused = team.run(None, env, seed=3, trace=tmp_path, approve=policy, max_steps=3)
    assert asked == ["typing into a password field"] * 2 + ['click on "Submit" (submit)']
    assert not refused.success and refused.n_steps == 3
    assert read_trace(refused.trace_path).steps[-1]["info"]["approval"]["decision"] == "refused"
