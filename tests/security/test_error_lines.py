"""Every error line the command line prints has URL credentials masked, whatever raised it.

Not only ``CollabUIError``: an exception no command expected (a library's, a bug) becomes one
``error:`` line (exit 1, its traceback under ``--verbose``), argparse's usage errors, log
records of other libraries (httpx and openai log the URLs they call) and a thread's uncaught
exception all pass through ``collabui.redaction.redact_url``.
"""

from __future__ import annotations

import logging
import threading

import pytest

from collabui.cli import _log, main
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace

pytestmark = pytest.mark.security

URL = "http://bob:hunter22@llm.example.org/v1?api_key=sk-live-9&x=1"
MASKED = "http://***@llm.example.org/v1?api_key=***&x=1"
SECRETS = ("hunter22", "sk-live-9")


def _clean(text: str) -> None:
    for value in SECRETS:
        assert value not in text, value


@pytest.mark.parametrize("error", [RuntimeError(f"cannot reach {URL}"), OSError(f"connect {URL}: refused"),
                                   KeyError(URL)])
def test_an_unexpected_exception_is_one_masked_line(monkeypatch, capsys, error):
    def fail(args):
        raise error

    monkeypatch.setattr("collabui.cli.run.run_command", fail)
    assert main(["envs"]) == 1
    err = capsys.readouterr().err
    _clean(err)
    [line] = err.splitlines()
    assert line.startswith(f"error: {type(error).__name__}: ") and MASKED in line
    assert "--verbose" in line


def test_verbose_shows_the_traceback_masked(monkeypatch, capsys):
    def fail(args):
        raise RuntimeError(f"cannot reach {URL}")

    monkeypatch.setattr("collabui.cli.run.run_command", fail)
    assert main(["envs", "--verbose"]) == 1
    err = capsys.readouterr().err
    _clean(err)
    assert "Traceback (most recent call last)" in err and err.count(MASKED) == 2  # traceback + line


def test_other_libraries_log_records_are_masked(monkeypatch, capsys):
    def log_and_fail(args):
        logging.getLogger("httpx").warning("HTTP Request: POST %s \"HTTP/1.1 401\"", URL)
        logging.getLogger("openai._base_client").error("giving up on %s", URL)
        logging.getLogger("urllib3").info("quiet below warning %s", URL)
        return 0

    monkeypatch.setattr("collabui.cli.run.run_command", log_and_fail)
    assert main(["envs"]) == 0
    err = capsys.readouterr().err
    _clean(err)
    assert err.splitlines() == [f'warning: httpx: HTTP Request: POST {MASKED} "HTTP/1.1 401"',
                                f"error: openai._base_client: giving up on {MASKED}"]


def test_usage_errors_are_masked(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--episodes", URL])
    err = capsys.readouterr().err
    _clean(err)
    assert exited.value.code == 2 and MASKED in err


def test_a_threads_uncaught_exception_is_masked(monkeypatch, capsys):
    monkeypatch.setattr(threading, "excepthook", _log.thread_excepthook)

    def boom() -> None:
        raise ConnectionError(f"lost {URL}")

    thread = threading.Thread(target=boom, name="fetcher")
    thread.start()
    thread.join()
    err = capsys.readouterr().err
    _clean(err)
    assert "Exception in thread fetcher" in err and f"ConnectionError: lost {MASKED}" in err


@pytest.mark.browser
def test_a_model_error_mid_run_is_masked_everywhere(tmp_path, monkeypatch, capfd):
    """A real run on MiniWoB++ whose model raises a plain RuntimeError quoting its endpoint:
    one masked error line, exit 1, and the trace's end record masked too."""

    class Unreachable(ScriptedChatModel):
        def generate(self, requests):
            raise RuntimeError(f"POST {URL} failed: 401")

    monkeypatch.setattr("collabui.models.spec.load_model",
                        lambda spec, **kwargs: Unreachable(["x"], name="unreachable"))
    code = main(["run", "--env", "miniwob/click-button", "--model", "unreachable", "--agents", "1",
                 "--rounds", "1", "--max-steps", "1", "--no-screenshots", "--trace-dir", str(tmp_path)])
    out, err = capfd.readouterr()
    _clean(out + err)
    assert code == 1 and err.splitlines()[-1].startswith(f"error: RuntimeError: POST {MASKED}"), out + err
    trace = read_trace(next(tmp_path.glob("*.jsonl")))
    assert trace.end["error"] == f"RuntimeError: POST {MASKED} failed: 401"
    _clean((next(tmp_path.glob("*.jsonl"))).read_text())
