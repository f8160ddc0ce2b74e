"""``python -m jupyter_trainer``: the ``jupyter-trainer`` command."""

import sys

from .frontends.cli import main

sys.exit(main())
