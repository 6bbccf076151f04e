"""Secrets and passwords never reach a trace, a prompt, a report or the terminal.

A scripted team types into real pages: MiniWoB++ enter-password and login-user (with
``secrets``, and without them, where password fields alone are masked) and a local login page
that echoes what it received. The environment must get the real values (the task succeeds, the
server saw them) while no byte written (trace files, stdout, stderr) holds a secret, and a typed
password survives only in the task sentence the user gave.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported before any test here patches collabui.models.spec.load_model: the eval module binds
# the loader at import, and a first import under a patch kept the fake for every later test.
import collabui.evaluation.miniwob  # noqa: F401
from collabui import CollabAgentTeam
from collabui.cli import main
from collabui.devices import BrowserDevice, make_env
from collabui.errors import ConfigError
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel
from collabui.redaction import Redactor, Secrets, redact_url
from collabui.trace import read_trace
from tests.local_site import LocalSite, serve

pytestmark = pytest.mark.security

#: enter-password seeds whose password is long enough (>= 5 characters) not to occur by chance.
SEED = 3
PASSWORD = "D91YP"


def _form_filler(request: ChatRequest) -> str:
    """Fill the first empty field of the page with the quoted word the task names for it (a
    ``<secret:...>`` placeholder when the task holds one: password fields take the last), then
    press the button."""
    text = str(request.messages[-1]["content"])
    task = re.search(r"^Task: (.*)$", text, re.M).group(1)
    page = next(line for line in text.splitlines() if line.startswith("<"))
    values = re.findall(r'"([^"]+)"', task)
    for element, content in re.findall(r"<input\[([A-Z]+)\]\| ([^>]*)>", page):
        if content in ("", "password"):
            value = values[-1] if content == "password" else values[0]
            return (f"Thought: type {value}.\nAction: {{\"action\": \"type_string\", "
                    f"\"element_id\": \"{element}\", \"content\": \"{value}\"}}")
    button = re.findall(r"<button\[([A-Z]+)\]\|", page)[-1]
    return f'Thought: submit.\nAction: {{"action": "click", "element_id": "{button}"}}'


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def _team() -> CollabAgentTeam:
    return CollabAgentTeam(ScriptedChatModel(_form_filler), n_agents=2, rounds=2, topology="chain",
                           max_steps=5, seed=0)


@pytest.mark.browser
def test_secret_typed_on_miniwob_never_written(tmp_path, capfd):
    with make_env("miniwob/enter-password") as env:
        result = _team().run(None, env, seed=SEED, trace=tmp_path, secrets={"pw": PASSWORD})
    out, err = capfd.readouterr()
    assert result.success  # the page received the real value, twice
    assert result.task == 'Enter the password "<secret:pw>" into both text fields and press submit.'
    written = _all_bytes(tmp_path)
    assert PASSWORD.encode() not in written and PASSWORD not in out + err
    assert b"<secret:pw>" in written
    trace = read_trace(next(tmp_path.glob("*.jsonl")))
    assert trace.steps[0]["executed"]["content"] == "<secret:pw>"
    # Each field named by its label too: the history tells which of the two is filled.
    assert trace.steps[2]["history"] == [f"type_string(<input| password> ({label}), '<secret:pw>', False)"
                                         for label in ("Password", "Verify password")]
    assert PASSWORD not in repr(result)


@pytest.mark.browser
def test_password_the_environment_names_is_masked_everywhere(tmp_path, capfd, monkeypatch):
    """Through the CLI (live view on stdout), no secrets given: the environment's own task names
    the password, so the printed task line, the trace header and every record mask it from the
    start, as the typed value is masked."""
    monkeypatch.setattr("collabui.models.spec.load_model",
                        lambda spec, **kwargs: ScriptedChatModel(_form_filler))
    code = main(["run", "--env", "miniwob/enter-password", "--model", "scripted", "--agents", "2",
                 "--rounds", "2", "--topology", "chain", "--seed", str(SEED), "--max-steps", "5",
                 "--no-screenshots", "--trace-dir", str(tmp_path)])
    out, err = capfd.readouterr()
    assert code == 0 and "success" in out, out + err
    assert PASSWORD not in out + err
    assert 'task: Enter the password "***" into both text fields and press submit.' in out
    trace = read_trace(next(tmp_path.glob("*.jsonl")))
    assert trace.header["task"] == 'Enter the password "***" into both text fields and press submit.'
    for record in [*trace.steps, trace.end]:
        assert PASSWORD not in json.dumps(record), record.get("t")
    assert trace.steps[0]["executed"]["content"] == "***"
    assert trace.steps[0]["proposals"][0][0]["raw"].endswith('"content": "***"}')


def test_task_password_masked_only_in_an_environments_task(tmp_path):
    """The task the caller gives stays as given (their own input); the same sentence coming
    from the environment has its password masked in the header and the result from the start."""
    from collabui.devices.base import Observation
    from collabui.devices.fake import FakeDevice

    task = 'Log in with the password "hunter22" and press the button.'
    model = ScriptedChatModel(['Action: {"action": "click", "element_id": "A"}'], cycle=True)
    team = CollabAgentTeam(model, n_agents=1, rounds=1, max_steps=1)
    given = team.run(task, FakeDevice([Observation(text="<button[A]| ok>")]), trace=tmp_path / "given")
    from_env = team.run(None, FakeDevice([Observation(text="<button[A]| ok>")], task=task),
                        trace=tmp_path / "env")
    assert given.task == task and read_trace(given.trace_path).header["task"] == task
    assert from_env.task == 'Log in with the password "***" and press the button.'
    assert b"hunter22" not in _all_bytes(tmp_path / "env")
    # The agents still read the real task: they have to type it.
    assert "hunter22" in str(model.requests[-1].messages[-1]["content"])


@pytest.mark.browser
def test_login_user_with_two_secrets(tmp_path, capfd):
    with make_env("miniwob/login-user") as env:
        task = env.reset(seed=SEED).task
        user, password = re.findall(r'"([^"]+)"', task)
        result = _team().run(None, env, seed=SEED, trace=tmp_path,
                             secrets={"user": user, "password": password})
    out, err = capfd.readouterr()
    assert result.success, result.error
    written = _all_bytes(tmp_path).decode()
    for value in (user, password):
        assert not re.search(rf"\b{re.escape(value)}\b", written + out + err)
    assert "<secret:user>" in written and "<secret:password>" in written


LOGIN = """<html><head><title>Login</title></head><body>
<form method="get" action="welcome.html">
<input name="user" placeholder="user"> <input name="pw" type="password" placeholder="password">
<button>Log in</button></form></body></html>"""
WELCOME = """<html><head><title>Welcome</title></head><body><p id="echo"></p>
<script>document.getElementById('echo').textContent = 'got ' + location.search;</script>
</body></html>"""


@pytest.fixture(scope="module")
def login_site(tmp_path_factory) -> Iterator[LocalSite]:
    root = tmp_path_factory.mktemp("login")
    (root / "login.html").write_text(LOGIN)
    (root / "welcome.html").write_text(WELCOME)
    with serve(root) as site:
        yield site


@pytest.mark.browser
def test_local_page_that_echoes_the_secret(tmp_path, capfd, login_site):
    """The page puts both values into its URL and its text: the agents, the trace and the
    terminal see placeholders; the server got the real values."""
    user, password = "alice.w", "Tr0ub4dor&3"
    task = "Log in as <secret:user> with the password <secret:pw>; press the button."
    script = [
        'Action: {"action": "type_string", "element_id": "A", "content": "<secret:user>"}',
        'Action: {"action": "type_string", "element_id": "B", "content": "<secret:pw>"}',
        'Action: {"action": "click", "element_id": "C"}',
        'Action: {"action": "finish", "answer": "logged in"}',
    ]
    model = ScriptedChatModel([a for a in script for _ in range(2)])
    team = CollabAgentTeam(model, n_agents=2, rounds=1, topology="independent", max_steps=4)
    with BrowserDevice(start_url=login_site.url("login.html"), screenshots=True) as device:
        # A real page asks before typing a password (collabui.approval); this test is about secrets.
        result = team.run(task, device, trace=tmp_path, secrets={"user": user, "pw": password},
                          approve="always")
    out, err = capfd.readouterr()
    assert any("Tr0ub4dor%263" in r and "alice.w" in r for r in login_site.requests)
    final = result.steps[-1].observation
    assert final.tabs == ("Welcome",) and "<secret:user>" in final.url
    assert "got ?user=<secret:user>" in final.text
    written = _all_bytes(tmp_path)
    for value in (user, password, "Tr0ub4dor%263"):
        assert value.encode() not in written and value not in out + err
    prompts = " ".join(str(m["content"]) for r in model.requests for m in r.messages)
    assert user not in prompts and "Tr0ub4dor" not in prompts


def test_secret_in_an_error_message_is_concealed(tmp_path):
    class Exploding(ScriptedChatModel):
        def generate(self, requests):
            raise RuntimeError("server said: bad token s3cr3t-value")

    team = CollabAgentTeam(Exploding(["x"]), n_agents=1, rounds=1)
    from collabui.devices.base import Observation
    from collabui.devices.fake import FakeDevice
    from collabui.errors import CollabUIError

    device = FakeDevice([Observation(text="<button[A]| ok>", task="t")])
    with pytest.raises(CollabUIError) as raised:
        team.run("use <secret:k>", device, trace=tmp_path, secrets={"k": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(raised.value) and "<secret:k>" in str(raised.value)
    assert b"s3cr3t-value" not in _all_bytes(tmp_path)


def test_cli_secret_reads_the_environment_and_checks_names(monkeypatch, capsys):
    from collabui.cli.run import read_secrets

    monkeypatch.setenv("SITE_PW", "from-env")
    assert read_secrets(["SITE_PW"]) == {"SITE_PW": "from-env"}
    monkeypatch.delenv("SITE_PW")
    monkeypatch.setattr("getpass.getpass", lambda prompt: "typed-in")
    assert read_secrets(["SITE_PW"]) == {"SITE_PW": "typed-in"}
    monkeypatch.setattr("getpass.getpass", lambda prompt: "")
    with pytest.raises(ConfigError, match="secret 'SITE_PW' has no value; give a non-empty string"):
        read_secrets(["SITE_PW"])
    with pytest.raises(ConfigError, match="secret name 'a b' is not usable"):
        Secrets({"a b": "x"})


def test_redact_url_masks_credentials_in_specs():
    spec = "openai:m@https://bob:hunter22@llm.example.org/v1?api_key=sk-123&x=1"
    assert redact_url(spec) == "openai:m@https://***@llm.example.org/v1?api_key=***&x=1"
    assert redact_url("Authorization: Bearer abcdefgh12345") == "Authorization: Bearer ***"
    assert redact_url("smollm2") == "smollm2"
    # Masking twice (a message quoting a masked spec, masked again on its way out) changes nothing.
    quoted = f"model spec {redact_url(spec)!r}: no answer"
    assert redact_url(quoted) == quoted and redact_url("?key=***abc") == "?key=***"


def test_password_masking_respects_word_boundaries_and_ids():
    redactor = Redactor()
    redactor.add_password("ab")
    assert redactor.text("type ab then about") == "type *** then about"
    record = {"element_id": "ab", "content": "ab", "tree": {"id": "ab", "parts": ["ab"]}}
    assert redactor.data(record) == {"element_id": "ab", "content": "***",
                                     "tree": {"id": "ab", "parts": ["***"]}}


@pytest.mark.parametrize(("task", "password"), [
    ('Enter the password "D91YP" into both text fields and press submit.', "D91YP"),
    ('Enter the username "keneth" and the password "91YP" into the text fields.', "91YP"),
    ("Your password is 'x y z'.", "x y z"), ("password: hunter2, then log in", "hunter2"),
    ("Reset your password now.", None)])
def test_a_password_the_task_names_is_learned(task, password):
    redactor = Redactor()
    redactor.learn_task(task)
    assert redactor.passwords == ({password} if password else set())
    assert (password is None) == (redactor.text(task) == task)
    assert redactor.screen() == ((), tuple(redactor.passwords))


@pytest.mark.browser
def test_model_spec_credentials_never_echoed(tmp_path, capfd, monkeypatch):
    spec = "openai:m@http://bob:hunter22@127.0.0.1:9/v1?api_key=sk-secret-1"
    monkeypatch.setattr("collabui.models.spec.load_model",
                        lambda s, **kwargs: ScriptedChatModel(
                            ['Action: {"action": "click", "element_id": "A"}'], cycle=True,
                            name=s))
    main(["run", "--env", "miniwob/click-button", "--model", spec, "--agents", "1", "--rounds", "1",
          "--max-steps", "1", "--no-screenshots", "--trace-dir", str(tmp_path)])
    out, err = capfd.readouterr()
    written = _all_bytes(tmp_path).decode()
    for value in ("hunter22", "sk-secret-1"):
        assert value not in out + err + written
    assert "http://***@127.0.0.1:9/v1?api_key=***" in out + written


def _run_folder_bytes(folder: Path) -> bytes:
    """Every file of an eval run folder, names included (run.json, results.json, summary.md,
    episodes.jsonl, traces and their screenshots)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return b"".join(str(p.relative_to(folder)).encode() + p.read_bytes() for p in files)


#: Eval seed whose two enter-password episodes have passwords of 5 characters (not found by
#: chance in a screenshot's bytes).
EVAL_SEED = 13


@pytest.mark.browser
def test_eval_run_folder_never_holds_the_typed_password(tmp_path, capfd, monkeypatch):
    """`collabui eval miniwob` on enter-password: the environment's task names the password and
    the team types it (no secrets given). Not one byte of the run folder nor of the terminal
    output holds it; the page got it (both episodes succeed)."""
    monkeypatch.setattr("collabui.evaluation.miniwob.load_model",
                        lambda spec, **kwargs: ScriptedChatModel(_form_filler))
    out_dir = tmp_path / "eval"
    code = main(["eval", "miniwob", "--tasks", "enter-password", "--episodes", "2", "--seed", str(EVAL_SEED),
                 "--model", "scripted", "--agents", "2", "--rounds", "2", "--topology", "chain",
                 "--max-steps", "5", "--screenshots", "--out", str(out_dir)])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    episodes = [json.loads(line) for line in (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert [e["success"] for e in episodes] == [True, True]
    with make_env("miniwob/enter-password") as env:  # the passwords the pages asked for
        passwords = [re.findall(r'"([^"]+)"', env.reset(seed=e["seed"]).task)[0] for e in episodes]
    assert all(len(p) >= 5 for p in passwords), passwords
    written = _run_folder_bytes(out_dir)
    assert {"run.json", "results.json", "summary.md", "episodes.jsonl"} <= {p.name for p in out_dir.iterdir()}
    for password in passwords:
        assert password.encode() not in written and password not in out + err, password
    header = read_trace(episodes[0]["trace"]).header
    assert header["task"] == 'Enter the password "***" into both text fields and press submit.'


@pytest.mark.parametrize("spec", ["openai:http://user:secret1@127.0.0.1:9/v1?api_key=secret2",
                                  "openai:m@http://user:secret1@127.0.0.1:9/v1?api_key=secret2"])
def test_eval_model_spec_credentials_are_masked_when_the_run_fails(tmp_path, capfd, monkeypatch, spec):
    """A spec whose server cannot be reached (port 9) or that does not parse: the error line,
    run.json and everything else written hold the spec with its credentials masked."""
    from collabui.models import spec as model_spec

    # The real loader: the eval module may have bound an earlier test's patched one at import.
    monkeypatch.setattr("collabui.evaluation.miniwob.load_model", model_spec.load_model)
    out_dir = tmp_path / "eval"
    code = main(["eval", "miniwob", "--tasks", "click-button", "--episodes", "1", "--model", spec,
                 "--agents", "1", "--rounds", "1", "--max-steps", "1", "--out", str(out_dir)])
    out, err = capfd.readouterr()
    assert code == 2 and err.splitlines()[-1].startswith("error: "), out + err
    written = _run_folder_bytes(out_dir)
    for value in ("secret1", "secret2"):
        assert value not in out + err and value.encode() not in written, value
    assert json.loads((out_dir / "run.json").read_text())["model"] == redact_url(spec)
    assert "127.0.0.1:9/v1?api_key=***" in err + out and "://***@127.0.0.1" in err + out


@pytest.mark.browser
def test_a_passed_over_password_is_masked_in_the_trace(tmp_path):
    """skip_stale names the action it set aside in the trace's vote: typing the password again
    into the filled field is that action here, and the trace masks the password in it too."""
    def answer(request: ChatRequest) -> str:
        text = str(request.messages[-1]["content"])
        task = re.search(r"^Task: (.*)$", text, re.M).group(1)
        page = next(line for line in text.splitlines() if line.startswith("<"))
        if request.temperature < 0.4:  # three agents type the password, again and again
            field = re.search(r"<input\[([A-Z]+)\]\| password", page).group(1)
            value = re.findall(r'"([^"]+)"', task)[-1]
            return f'Action: {{"action": "type_string", "element_id": "{field}", "content": "{value}"}}'
        button = re.findall(r"<button\[([A-Z]+)\]\|", page)[-1]
        return f'Action: {{"action": "click", "element_id": "{button}"}}'

    team = CollabAgentTeam(ScriptedChatModel(answer), n_agents=4, rounds=1, topology="independent",
                           temperatures=(0.1, 0.1, 0.1, 0.8), max_steps=4, skip_stale=True)
    with make_env("miniwob/login-user") as env:
        password = re.findall(r'"([^"]+)"', env.reset(seed=SEED).task)[-1]
        team.run(None, env, seed=SEED, trace=tmp_path, episode_id="ep")
    trace = read_trace(tmp_path / "ep.jsonl")
    # typed, typed again (the field filled, the page unchanged), then the retyping passed over
    assert [s["executed"]["action"] for s in trace.steps] == ["type_string", "type_string", "click"]
    assert trace.steps[2]["vote"]["passed_over"].startswith("type_string(")
    assert password not in _all_bytes(tmp_path).decode()
