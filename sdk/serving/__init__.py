"""Serving: managed OpenAI-compatible servers, vLLM (one LoRA adapter per agent) and llama.cpp.

* :class:`VLLMServer` starts, waits for and stops a vLLM server process (``collabui serve``);
* :class:`LlamaCppServer` does the same for llama.cpp's server, the fast one on a CPU
  (a SmolLM2 fine-tune exported to GGUF once: :func:`write_gguf`);
* :func:`setup_vllm` creates the separate venv vLLM runs in (``collabui serve --setup``);
* :func:`answer_schema` / :func:`action_schema` are the JSON schemas for guided decoding
  (``LangChainModel(..., guided_json="web")``), generated from the action models.

Nothing here imports vLLM or llama.cpp: a server is always a separate process.
"""

from __future__ import annotations

from collabui.serving.gguf_export import write_gguf
from collabui.serving.llamacpp_server import LlamaCppServer
from collabui.serving.schema import action_schema, answer_schema
from collabui.serving.setup import is_set_up, setup_vllm, vllm_venv_dir
from collabui.serving.vllm_server import VLLMServer, free_port

__all__ = ["VLLMServer", "LlamaCppServer", "write_gguf", "free_port", "setup_vllm", "is_set_up", "vllm_venv_dir", "action_schema",
           "answer_schema"]
