"""``python -m rank_lab.book``: see :mod:`rank_lab.book.cli`."""

import sys

from .cli import main

sys.exit(main())
