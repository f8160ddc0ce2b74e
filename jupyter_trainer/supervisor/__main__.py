"""``python -m jupyter_trainer.supervisor --detach RUN_ID``: drive one run (see ``run``)."""

import sys

from .run import main

sys.exit(main())
