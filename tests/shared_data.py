"""Data the tests read from outside the repository: ``shared/data`` beside the clone.

The repository's parent folder holds ``shared/`` (CI clones the repository next to it), so the
path is resolved from this file, never from the working directory or an absolute path.
"""

from __future__ import annotations

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
AUTOWEBBENCH = SHARED_DATA / "autowebbench"
