"""``python -m jupyter_trainer.mirrors.mlflow sync RUN``: what the supervisor runs once a run
with ``--mlflow`` has ended (see ``sync``)."""

import sys

from .sync import main

sys.exit(main())
