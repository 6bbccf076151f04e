"""Output paths checked before a command starts anything (Chromium, a model, a long run).

A folder under a file or on a read-only disk used to end in a traceback minutes into a run;
here it is one ``error:`` line naming the flag and the fix, before any work.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

from collabui.errors import ConfigError

__all__ = ["check_outputs", "writable_folder"]

#: (command, subcommand) -> (flag, dest, "folder" | "file") of each output path it takes.
_OUTPUTS: dict[tuple[str, str | None], tuple[tuple[str, str, str], ...]] = {
    ("run", None): (("--trace-dir", "trace_dir", "folder"),),
    ("eval", "miniwob"): (("--out", "out", "folder"),),
    ("eval", "autowebbench"): (("--out", "out", "folder"),),
    ("eval", "compare"): (("--out", "out", "file"),),
    ("train", "label"): (("--out", "out", "file"),),
    ("train", "pairs"): (("--out", "out", "file"),),
    ("train", "dpo"): (("--out", "out", "folder"),),
    ("train", "sft"): (("--out", "out", "folder"),),
    ("train", "synth"): (("--out", "out", "folder"),),
    ("train", "report"): (("--out", "out", "folder"),),
    ("view", None): (("--out", "out", "file"),),
}


def check_outputs(args: argparse.Namespace) -> None:
    """Raise a one-line ConfigError for an output path of ``args`` that cannot be written."""
    sub = getattr(args, "eval_command", None) or getattr(args, "train_command", None)
    for flag, dest, kind in _OUTPUTS.get((args.command, sub), ()):
        value = getattr(args, dest, None)
        if value is None:
            continue
        path = Path(value).expanduser()
        if kind == "folder":
            writable_folder(path, flag)
        elif path.is_dir():
            raise ConfigError(f"{flag} {value} is a folder; pass a file path")
        else:
            writable_folder(path.parent, flag, shown=value)


def writable_folder(path: Path, flag: str, *, shown: str | Path | None = None) -> None:
    """Try writing in ``path`` (creating it and its parents for the try), or say why that is
    impossible. Folders the try created are removed again: a command refused later for another
    reason leaves no empty run folder behind; the run creates its own."""
    shown = shown or path
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {shown}: {path} is a file, not a folder; pass another path")
    created = [folder for folder in (path, *path.parents) if not folder.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        # Permissions alone do not tell (root ignores them; a read-only mount does not): try.
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{flag} {shown}: cannot write there ({reason}); pass a folder you can "
                          "write to") from None
    finally:
        for folder in created:  # innermost first; one something else filled meanwhile stays
            with contextlib.suppress(OSError):
                folder.rmdir()
