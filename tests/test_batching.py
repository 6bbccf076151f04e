"""SuperstepBatcher: one batched call per superstep group, and a cancelled wait costs nothing more."""

from __future__ import annotations

import asyncio

from collabui.batching import SuperstepBatcher
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel

_ASK = ChatRequest(({"role": "user", "content": "hi"},))


def test_a_group_is_one_call_and_each_member_gets_its_answer():
    calls = []
    model = ScriptedChatModel(lambda request: calls.append(request.seed) or f"answer {request.seed}")

    async def main():
        batcher = SuperstepBatcher()
        members = [batcher.asubmit("step", 3, model, ChatRequest(_ASK.messages, seed=i)) for i in range(3)]
        return batcher, [r.text for r in await asyncio.gather(*members)]

    batcher, texts = asyncio.run(main())
    assert texts == ["answer 0", "answer 1", "answer 2"] and batcher.batch_sizes == [3] and sorted(calls) == [0, 1, 2]


def test_a_member_cancelled_while_the_batch_runs_does_not_break_the_others():
    """Ctrl-C cancels the graph's waiting nodes while the last member's call is in flight; the
    batch then delivers to the members still waiting and skips the cancelled one (it raised
    InvalidStateError into asyncio's shutdown before)."""
    class Slow(ScriptedChatModel):
        async def agenerate(self, requests):
            self.started.set()
            await asyncio.sleep(0.2)
            return self.generate(requests)

    async def main():
        model = Slow(lambda request: "done")
        model.started = asyncio.Event()  # made inside the loop that waits on it
        batcher = SuperstepBatcher()
        waiting = asyncio.ensure_future(batcher.asubmit("step", 2, model, _ASK))
        await asyncio.sleep(0)  # the first member waits for the group
        last = asyncio.ensure_future(batcher.asubmit("step", 2, model, _ASK))
        await model.started.wait()
        waiting.cancel()
        return (await asyncio.gather(waiting, last, return_exceptions=True)), batcher

    (first, second), batcher = asyncio.run(main())
    assert isinstance(first, asyncio.CancelledError) and second.text == "done" and batcher.batch_sizes == [2]
