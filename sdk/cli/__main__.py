"""``python -m collabui.cli``: the same as the ``collabui`` command."""

import sys

from collabui.cli import main

sys.exit(main())
