"""Actions that did not happen are marked so in the agents' history and in the trace.

A scripted team on a real page (Chromium, a local HTTP server; "another site" on 127.0.0.2)
clicks a Pay button the approval policy refuses, jumps to a ``data:`` URL and clicks a link to
another site, both of which the navigation guard blocks, then clicks a harmless button. The
prompts of later steps must show the first three as not done (``[refused]``, ``[blocked: ...]``)
and the last one plainly; the trace's step records say the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from collabui import CollabAgentTeam
from collabui.devices import BrowserDevice
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace
from tests.local_site import LocalSite, serve

pytestmark = [pytest.mark.security, pytest.mark.browser]

#: The team's actions, one a step: (action, text of the element it targets or None).
PLAN = [("click", "Pay"), ("jump_to", None), ("click", "offsite link"), ("click", "Details"), ("finish", None)]


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Iterator[tuple[LocalSite, LocalSite]]:
    home_root, other_root = tmp_path_factory.mktemp("shop"), tmp_path_factory.mktemp("other")
    (other_root / "off.html").write_text("<html><body><p>you left</p></body></html>")
    with serve(other_root, "127.0.0.2") as other, serve(home_root, "127.0.0.1") as home:
        (home_root / "cart.html").write_text(f"""<html><head><title>Cart</title></head><body>
<button onclick="document.title='PAID'">Pay</button>
<a href="{other.url('off.html')}">offsite link</a>
<button onclick="this.textContent='Details shown'">Details</button></body></html>""")
        yield home, other


def _planned(request: ChatRequest) -> str:
    """The PLAN's action for the step the prompt is at (counted from its history)."""
    text = str(request.messages[-1]["content"])
    done = re.search(r"^Previous actions: (.*)$", text, re.M).group(1)
    kind, target = PLAN[0 if done == "None" else done.count("; ") + 1]
    if kind == "jump_to":
        return 'Action: {"action": "jump_to", "url": "data:text/html,<p>elsewhere</p>"}'
    if kind == "finish":
        return 'Action: {"action": "finish"}'
    element = re.search(r"\[([A-Z]+)\]\| " + re.escape(target) + ">", text).group(1)
    return json.dumps({"action": "click", "element_id": element}).join(["Action: ", ""])


def test_refused_and_blocked_actions_read_as_not_done(shop, tmp_path):
    home, other = shop
    model = ScriptedChatModel(_planned)
    team = CollabAgentTeam(model, n_agents=1, rounds=1, max_steps=len(PLAN))
    with BrowserDevice(start_url=home.url("cart.html"), task="Look at the cart", action_timeout_s=5.0) as device:
        result = team.run(None, device, trace=tmp_path, approve=lambda request: "Pay" not in request.reason)
        tabs = device.observe().tabs
    expected = ["click(<button| Pay>) [refused]",
                "jump_to('data:text/html,<p>elsewhere</p>', False) [blocked: non-web URL]",
                "click(<a| offsite link>) [blocked: off-site]",
                "click(<button| Details>)"]
    last_prompt = str(model.requests[-1].messages[-1]["content"])
    assert "Previous actions: " + "; ".join(f"{k + 1}. {e}" for k, e in enumerate(expected)) in last_prompt
    assert tabs == ("Cart",) and other.requests == []  # nothing was paid, the other site never asked
    trace = read_trace(result.trace_path)
    assert [s["history_entry"] for s in trace.steps] == [*expected, "finish()"]
    assert trace.steps[-1]["history"] == expected
    assert trace.steps[0]["info"]["approval"]["decision"] == "refused"
    assert [len(s["info"].get("blocked_navigations", [])) for s in trace.steps[1:4]] == [1, 1, 0]
