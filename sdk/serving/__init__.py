"""Serving: a managed vLLM OpenAI-compatible server with one LoRA adapter per agent.

* :class:`VLLMServer` starts, waits for and stops a vLLM server process (``collabui serve``);
* :func:`setup_vllm` creates the separate venv vLLM runs in (``collabui serve --setup``);
* :func:`answer_schema` / :func:`action_schema` are the JSON schemas for guided decoding
  (``LangChainModel(..., guided_json="web")``), generated from the action models.

Nothing here imports vLLM: the server is always a separate process.
"""

from __future__ import annotations

from collabui.serving.schema import action_schema, answer_schema
from collabui.serving.setup import is_set_up, setup_vllm, vllm_venv_dir
from collabui.serving.vllm_server import VLLMServer, free_port

__all__ = ["VLLMServer", "free_port", "setup_vllm", "is_set_up", "vllm_venv_dir", "action_schema",
           "answer_schema"]
