"""``collabui run`` in a subprocess with a scripted model, for the kill -9 tests (tests/test_durable.py).

Usage: ``python tests/durable_worker.py run ...`` (the collabui CLI arguments, ``--seed 0``).
The model scrolls during steps 0 and 1 and then clicks the button the MiniWoB++ task names.
Every request is appended to ``$WORKER_LOG`` as ``t i j`` (read from the request seed, which the
team derives from the step t, agent i and round j). With ``$WORKER_HANG=t,i,j`` that request
touches ``$WORKER_MARK`` and hangs, so that the test can kill the process mid-step.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from collabui.cli import main
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel


def _where(request: ChatRequest) -> tuple[int, int, int]:
    # TeamConfig.seed = 0: seed = t * 1009 + i * 31 + j (collabui.team._request)
    t, rest = divmod(request.seed or 0, 1009)
    return t, rest // 31, rest % 31


def _answer(request: ChatRequest) -> str:
    t, i, j = _where(request)
    with open(os.environ["WORKER_LOG"], "a") as log:
        log.write(f"{t} {i} {j}\n")
    if os.environ.get("WORKER_HANG") == f"{t},{i},{j}":
        Path(os.environ["WORKER_MARK"]).touch()
        time.sleep(600)
    if t < 2:
        return 'Action: {"action": "scroll_page", "direction": "down"}'
    text = str(request.messages[-1]["content"])
    word = re.search(r'Click on the "([^"]+)" button', text).group(1)
    element = re.search(r"<button\[([A-Z]+)\]\| " + re.escape(word) + ">", text).group(1)
    return f'Action: {{"action": "click", "element_id": "{element}"}}'


if __name__ == "__main__":
    import collabui.models.spec

    collabui.models.spec.load_model = lambda spec, **kwargs: ScriptedChatModel(_answer)
    sys.exit(main(sys.argv[1:]))
