"""The REST API's routes, under ``/jupyter-trainer/api/``: every handler module's."""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from .base import API_PREFIX, RUN, NotFoundHandler
from .models import model_routes
from .runs import (
    CancelHandler,
    RankReadHandler,
    RunHandler,
    RunsHandler,
    StreamHandler,
    VersionHandler,
)
from .sweeps import sweep_routes
from .view import ViewSocket


def setup_handlers(web_app: Any) -> None:
    base = url_path_join(web_app.settings["base_url"], API_PREFIX)
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "version"), VersionHandler),
            (url_path_join(base, "runs"), RunsHandler),
            (url_path_join(base, "runs", RUN), RunHandler),
            (url_path_join(base, "runs", RUN, "events"), RankReadHandler, {"field": "events"}),
            (url_path_join(base, "runs", RUN, "logs"), RankReadHandler, {"field": "text"}),
            (url_path_join(base, "runs", RUN, "stream"), StreamHandler),
            (url_path_join(base, "runs", RUN, "cancel"), CancelHandler),
            (url_path_join(base, "runs", RUN, "view"), ViewSocket),
            *sweep_routes(base),
            *model_routes(base),
            (url_path_join(base, "(.*)"), NotFoundHandler),
        ],
    )
