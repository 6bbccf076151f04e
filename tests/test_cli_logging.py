"""The CLI's logging: one --verbose/--quiet pair on every command, diagnostics on stderr,
credentials in URLs masked on the way out."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from collabui.cli import _leaf_commands, build_parser
from collabui.cli._log import configure, level_of

log = logging.getLogger("collabui.test")
SPEC = "openai:gpt@https://user:s3cret@host/v1?api_key=K3Y"


def test_every_command_takes_verbose_and_quiet() -> None:
    leaves = _leaf_commands(build_parser())
    assert len(leaves) > 10  # run, envs, eval miniwob, train dpo, ...
    for leaf in leaves:
        flags = {s for a in leaf._actions for s in a.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, leaf.prog
    args = build_parser().parse_args(["train", "marl", "--out", "x", "-q"])
    assert level_of(args) == logging.WARNING
    args = build_parser().parse_args(["bench", "--verbose"])
    assert level_of(args) == logging.DEBUG and level_of(argparse.Namespace()) == logging.INFO
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "-v", "-q"])


@pytest.mark.parametrize(("level", "shown"), [(logging.INFO, ["progress", "warning: odd"]),
                                               (logging.WARNING, ["warning: odd"]),
                                               (logging.DEBUG, ["collabui.test: detail", "collabui.test: progress",
                                                                "warning: collabui.test: odd"])])
def test_levels(level: int, shown: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    configure(level)
    configure(level)  # a second main() in one process replaces the handler, never doubles it
    log.debug("detail")
    log.info("progress")
    log.warning("odd")
    assert capsys.readouterr().err.splitlines() == shown


def test_credentials_never_reach_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    configure(logging.INFO)
    log.info("loading %s", SPEC)
    try:
        raise RuntimeError(f"cannot reach {SPEC}")
    except RuntimeError:
        log.exception("failed")
    err = capsys.readouterr().err
    assert "s3cret" not in err and "K3Y" not in err
    assert "openai:gpt@https://***@host/v1?api_key=***" in err
    assert err.count("https://***@host") == 2  # the message and the exception in the traceback


def _results(harness: str, metric: str = "success_rate") -> dict:
    from collabui.evaluation.stats import rate_entry

    return {"schema": "collabui.eval", "version": 1, "harness": harness, "system": {"label": harness}, "data": {},
            "overall": {metric: rate_entry(1, 2)}, "breakdown": {}, "counts": {}, "started": None,
            "seconds": 0.0, "command": None}


def test_quiet_silences_the_commands_notes_but_never_warnings_or_errors(tmp_path, capsys) -> None:
    """The commands' own notes go through logging too: -q drops them; warnings and errors stay."""
    from collabui.cli import main

    a, same, other = tmp_path / "a.json", tmp_path / "same.json", tmp_path / "other.json"
    a.write_text(json.dumps(_results("miniwob")))
    same.write_text(json.dumps(_results("miniwob")))
    other.write_text(json.dumps(_results("autowebbench", "exact_match")))
    compare = ["eval", "compare", str(a), str(same), "--out", str(tmp_path / "d.md")]
    assert main(compare) == 0
    assert capsys.readouterr().err == f"written {tmp_path / 'd.md'}\n"
    assert main([*compare, "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["eval", "compare", str(a), str(other), "-q"]) == 0
    assert capsys.readouterr().err == "warning: no metric is shared by A and B (different harnesses?)\n"
    assert main(["eval", "compare", str(tmp_path / "nope.json"), str(a), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope.json" in err and err.count("\n") == 1
