"""Reading the project's JSONL files (labels, pairs, SFT data, rollout and evaluation logs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["iter_jsonl", "read_json"]


def iter_jsonl(path: Path, *, error: type[Exception], fix: str, torn_tail_ok: bool = False) -> Iterator[tuple[str, Any]]:
    """Yield ``("<path>:<line>", record)`` for every non-blank line of ``path``.

    A line that is not JSON raises ``error("<path>:<line> is not JSON; <fix>")``, except the
    last line when ``torn_tail_ok``: a process killed mid-write leaves that one torn, and the
    files that allow it are rewritten from that point on resume.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if torn_tail_ok and k == len(lines) - 1:
                return
            raise error(f"{path}:{k + 1} is not JSON; {fix}") from None
        yield f"{path}:{k + 1}", record


def read_json(path: Path, *, error: type[Exception], fix: str) -> Any:
    """The JSON document in ``path``; one cut short by a crash or a full disk raises
    ``error("<path> is cut short (not JSON); <fix>")``."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise error(f"{path} is cut short (not JSON); {fix}") from None
