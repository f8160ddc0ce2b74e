"""REST handlers of the model registry: every model with its latest version, and one model
with every version and its lineage, for the Lab panel's models list.

``GET models`` lists one row per model, by name: how many versions it has and its latest
version's number, time, run, size and tags. ``GET models/MODEL`` answers every version of
the model, newest first, each with its ``lineage.json`` and whether its run is still in the
store (a version outlives its run). A model name is checked before any path is built from
it: a malformed one answers 400, an unknown one 404.
"""

from __future__ import annotations

from typing import Any

import tornado.web
from jupyter_server.utils import url_path_join

from ..errors import ModelNotFound, TrainerError
from ..store import Store
from ..store.models import ModelStore, validate_model_name
from .handlers import BaseHandler

MODEL = r"(?P<name>[^/]+)"
ROW_FIELDS = ("version", "created", "run_id", "path", "files", "bytes", "tags")


def run_exists(store: Store, run_id: str) -> bool:
    try:
        store.existing(run_id)
    except (TrainerError, OSError):
        return False
    return True


def list_models(store: Store) -> list[dict[str, Any]]:
    """One row per model, by name: its number of versions and its latest version's fields."""
    latest: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for row in ModelStore(store.home).rows():  # by name, newest version first
        counts[row["name"]] = counts.get(row["name"], 0) + 1
        latest.setdefault(row["name"], row)
    return [{"name": name, "versions": counts[name], "latest": row["version"],
             **{k: row[k] for k in ROW_FIELDS if k != "version"},
             "run_exists": run_exists(store, row["run_id"])}
            for name, row in latest.items()]


def model_versions(store: Store, name: str) -> dict[str, Any]:
    """Every version of model ``name``, newest first, each with its lineage;
    ``ModelNotFound`` naming the models there are if it has none."""
    registry = ModelStore(store.home)
    registry.version_dir(name)
    versions = []
    for row in registry.rows(name):
        try:
            lineage = registry.lineage(name, row["version"])
        except (ModelNotFound, OSError, ValueError):  # removed meanwhile
            continue
        versions.append({**{k: row[k] for k in ROW_FIELDS},
                         "run_exists": run_exists(store, row["run_id"]), "lineage": lineage})
    return {"name": name, "versions": versions}


class ModelsHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        await self._execute_guarded(self._get())

    async def _get(self) -> None:
        self.write_json({"models": list_models(self.store)})


class ModelHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        await self._execute_guarded(self._get(name))

    async def _get(self, name: str) -> None:
        self.write_json(model_versions(self.store, validate_model_name(name)))


def model_routes(base: str) -> list[tuple]:
    return [
        (url_path_join(base, "models"), ModelsHandler),
        (url_path_join(base, "models", MODEL), ModelHandler),
    ]
