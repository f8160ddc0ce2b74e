"""The jupyter_server extension: an authenticated REST API over the run store.

The handlers only translate HTTP to the core (``store``, ``api``) and the core's errors to
HTTP statuses; no run logic lives here.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "jupyter_trainer.frontends.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from .page_status import keep_status_to_cells
    from .routes import setup_handlers

    setup_handlers(server_app.web_app)
    keep_status_to_cells(server_app.web_app)
    server_app.log.info("jupyter_trainer: REST API at %s", "/jupyter-trainer/api")
