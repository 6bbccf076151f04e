"""A real two-node Ray cluster on this machine: `eval miniwob --workers 2 --ray ADDRESS`.

The fixture starts what the README's commands start by hand: a head on 127.0.0.1 and a second
node on 127.0.0.2 (Linux routes all of 127/8 to the loopback device), one CPU each, both as
``ray start --block`` children of this test so that ending them ends every Ray process they
started. Every process of the cluster (raylets, Ray workers, the browsers they start) inherits
a tag in its environment; teardown asserts that none is left, and kills by pid any that is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray  # the ray extra, which make test installs: missing, these tests fail

from collabui.errors import ConfigError
from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob
from tests.evaluation.test_workers import outcomes

TAG_VARIABLE = "COLLABUI_RAY_TEST_TAG"


def tagged_processes(tag: str) -> list[int]:
    """Pids whose environment carries ``TAG_VARIABLE=tag`` (read from /proc)."""
    wanted, found = f"{TAG_VARIABLE}={tag}".encode(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # ended while we looked, or not ours to read
                if wanted in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"ray start did not print {text!r}; its output:\n{log.read_text(errors='replace')[-3000:]}")


class Cluster:
    def __init__(self, address: str, tag: str) -> None:
        self.address, self.tag = address, tag


@pytest.fixture
def two_node_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    ray_cli = str(Path(sys.executable).with_name("ray"))
    tag, port = uuid.uuid4().hex, _free_port()
    # A short folder: Ray's Unix sockets live under it (paths are limited to 107 bytes).
    temp = Path(tempfile.mkdtemp(prefix="cray-"))
    # Loopback only, so no token: set explicitly for the nodes and for this process (the
    # driver), else a token left in ~/.ray by any earlier private cluster turns auth on for
    # the head alone and the second node is refused.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    env = {**os.environ, TAG_VARIABLE: tag, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--num-cpus", "1", "--block", "--disable-usage-stats"]
    commands = [
        [ray_cli, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--include-dashboard", "false", "--temp-dir", str(temp), *common],
        [ray_cli, "start", "--address", f"127.0.0.1:{port}", "--node-ip-address", "127.0.0.2", *common],
    ]
    nodes: list[subprocess.Popen] = []
    try:
        for k, command in enumerate(commands):
            log = temp / f"node{k}.log"
            with log.open("wb") as out:
                nodes.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))
            _wait_for(log, "Ray runtime started", nodes[-1], timeout=120)
        _wait_for_cpus(f"127.0.0.1:{port}", 2, timeout=60)
        yield Cluster(f"127.0.0.1:{port}", tag)
    finally:
        for node in reversed(nodes):  # `ray start --block` stops its own Ray processes on SIGTERM
            node.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=60)
        left = _kill_tagged(tag)
        shutil.rmtree(temp, ignore_errors=True)
    assert left == [], f"processes of the Ray cluster outlived it: {left}"


def _wait_for_cpus(address: str, cpus: int, timeout: float) -> None:
    """Until the cluster's resource view holds both nodes: a node that has printed "started"
    may not be schedulable yet, and SPREAD then puts every actor on the head."""
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        deadline = time.monotonic() + timeout
        while ray.cluster_resources().get("CPU", 0) < cpus or sum(n["Alive"] for n in ray.nodes()) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster has {ray.cluster_resources()} after {timeout} s, not {cpus} CPUs")
            time.sleep(0.5)
    finally:
        ray.shutdown()


def _kill_tagged(tag: str) -> list[int]:
    """Wait a little for the tagged processes to end, then SIGKILL (by pid) and return those left."""
    deadline = time.monotonic() + 20
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = tagged_processes(tag)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.browser
@pytest.mark.slow  # about a minute on a quiet 2-core machine, two under load
def test_an_evaluation_across_two_ray_nodes_equals_the_one_process_run(two_node_cluster, tmp_path):
    config = {"tasks": "click-button,click-test", "episodes": 2, "model": "lexical",
              "team": default_team("lexical", max_steps=3)}
    evaluate_miniwob(MiniWoBEvalConfig(**config), tmp_path / "here", progress=False)
    results = evaluate_miniwob(MiniWoBEvalConfig(**config, workers=2, ray=two_node_cluster.address),
                               tmp_path / "ray", progress=False)
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "here")
    assert results["run"]["backend"] == "ray"
    workers = [json.loads(line)["worker"] for line in (tmp_path / "ray" / "episodes.jsonl").open()]
    assert len({w["node"] for w in workers}) == 2 and "127.0.0.2" in {w["ip"] for w in workers}
    # the browsers ran inside the cluster's workers (they carry its tag) and were closed with them
    browsers = [pid for pid in tagged_processes(two_node_cluster.tag)
                if "chrom" in Path(f"/proc/{pid}/comm").read_text(errors="replace")]
    assert browsers == []
    with pytest.raises(ConfigError, match=r"3 Ray workers need 3 CPUs on the cluster at .* it has 2; lower --workers"):
        evaluate_miniwob(MiniWoBEvalConfig(**config, workers=3, ray=two_node_cluster.address),
                         tmp_path / "too-many", progress=False)
