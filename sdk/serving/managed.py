"""Any local model spec on a vLLM server: what ``collabui serve`` and ``eval --serve`` start.

A local spec (``smollm2``, ``hf:PATH``, ``smollm2-trained``, ``trained:FOLDER``) and an optional
adapter folder become one :class:`VLLMServer`: a trained team bundle is served as its shared
model (base with the bundle's ``merge`` adapters folded in, made once:
:func:`collabui.models.bundle.merged_model_dir`) plus its per-agent LoRA adapters under their
bundle names, so agent i's requests name the adapter of its slot, exactly as ``LocalModel``
serves the bundle. The client a team talks to carries the bundle's team settings (prompt style,
page format, adapter slots, trained DAG) as ``team_defaults``, so the team runs as it would on
the local backend.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError
from collabui.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["ServedSpec", "ServedModel", "served_spec", "serve_model", "vllm_model_factory"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedSpec:
    """What a server needs for a model spec: the model folder (or ``smollm2``), the adapters it
    serves by name, the team settings the model was trained for, and the served base name."""

    model: str
    adapters: Mapping[str, Path] = field(default_factory=dict)
    team_defaults: Mapping[str, Any] = field(default_factory=dict)
    served_name: str | None = None


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
    return ServedSpec(str(merged_model_dir(folder)), named, defaults, served_name=_served_name(spec, folder))


def _served_name(spec: str, folder: Path) -> str:
    """A request-safe name for a bundle's shared model (its spec name or folder name)."""
    raw = spec if not spec.startswith("trained:") else f"trained-{folder.resolve().name}"
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
        log.info("vLLM is serving %s at %s (log %s)", server.name, server.base_url, server.log_path)

    @classmethod
    def of_spec(cls, spec: str, adapters: str | Path | None = None, *, client: Mapping[str, Any] | None = None,
                **server_fields: Any) -> ServedModel:
        """A server of the local spec ``spec`` (see :func:`served_spec`) and its client;
        ``server_fields`` are :class:`VLLMServer` fields (``enforce_eager``, ``kv_cache_gib``...)."""
        from collabui.serving.vllm_server import VLLMServer

        served = served_spec(spec, adapters)
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


@contextlib.contextmanager
def serve_model(spec: str, adapters: str | Path | None = None, *, client: Mapping[str, Any] | None = None,
                **server_fields: Any) -> Iterator[ServedModel]:
    """Start a vLLM server for ``spec`` and yield its :class:`ServedModel` (a team built on it
    runs as on the local backend); the server stops on exit, also on errors and Ctrl-C."""
    model = ServedModel.of_spec(spec, adapters, client=client, **server_fields)
    try:
        yield model
    finally:
        model.close()


def _served_folder(server_fields: Mapping[str, Any], base_dir: Path, adapters: Mapping[str, Path]) -> ServedModel:
    from collabui.serving.vllm_server import VLLMServer

    return ServedModel(VLLMServer(model=str(base_dir), adapters=dict(adapters), **server_fields))


def vllm_model_factory(**server_fields: Any) -> Callable[[Path, Mapping[str, Path]], ServedModel]:
    """A rollout model factory (``(base_dir, {"agent0": folder, ...}) -> ChatModel``, as MARL's
    ``model_factory``) that serves each set of adapters on a vLLM server of its own; closing the
    model stops it. It pickles (rollout workers build their own)."""
    return functools.partial(_served_folder, dict(server_fields))
