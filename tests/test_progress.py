"""Progress bars: drawn on a terminal at INFO, silent in pipes, under --quiet and when disabled."""

from __future__ import annotations

import io
import logging

import pytest

from collabui._progress import bars_wanted, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """stderr as a terminal; set in the test body (pytest's capture re-installs its own
    sys.stderr between a fixture's set-up and the test)."""
    fake = _Terminal()
    monkeypatch.setattr("sys.stderr", fake)
    monkeypatch.setenv("TERM", "xterm")
    return fake


def test_a_bar_needs_a_terminal_and_info(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _terminal(monkeypatch)
    assert not bars_wanted(), "a library user who configured no logging sees no bar"
    caplog.set_level(logging.INFO, logger="collabui")
    assert bars_wanted()
    caplog.set_level(logging.WARNING, logger="collabui")  # the CLI's --quiet
    assert not bars_wanted()


def test_bar_counts_items_and_resumed_ones(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    terminal = _terminal(monkeypatch)
    caplog.set_level(logging.INFO, logger="collabui")
    with progress_bar(3, "demo episodes", done=1) as advance:
        advance()
        advance()
    assert "demo episodes" in terminal.getvalue() and "3/3" in terminal.getvalue()


@pytest.mark.parametrize("enabled", [True, False])
def test_no_bar_in_a_pipe_or_when_disabled(enabled: bool, capsys: pytest.CaptureFixture[str],
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collabui")
    with progress_bar(2, "episodes", enabled=enabled) as advance:
        advance(2)
    assert capsys.readouterr().err == ""


def test_disabled_bar_on_a_terminal_draws_nothing(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    terminal = _terminal(monkeypatch)
    caplog.set_level(logging.INFO, logger="collabui")
    with progress_bar(2, "episodes", enabled=False) as advance:
        advance()
    assert terminal.getvalue() == ""
