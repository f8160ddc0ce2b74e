"""REST handlers of the model registry: every model with its latest version, one model with
every version and its lineage, for the Lab panel's models list, and deleting versions.

``GET models`` lists one row per model, by name: how many versions it has and its latest
version's number, time, run, size and tags. ``GET models/MODEL`` answers every version of
the model, newest first, each with its ``lineage.json`` and whether its run is still in the
store (a version outlives its run); a version whose record is damaged has an empty
``lineage`` and ``damaged``, the reason. ``GET models/MODEL/VERSION`` is one version.

``DELETE models/MODEL/VERSION`` deletes that version; ``DELETE models/MODEL?all=1`` every
version of the model (without ``all=1`` it answers 400: a version is named or every
version asked for, never assumed). Only versions the server's user registered can be
deleted (403 for another user's; the CLI's ``--force`` has no REST form). A model name
and a version are checked before any path is built from them: a malformed one answers 400,
an unknown one 404.
"""

from __future__ import annotations

import functools
from typing import Any

import tornado.web
from jupyter_server.utils import url_path_join
from tornado.ioloop import IOLoop

from ...api.models import delete_model
from ...core.errors import ModelNotFound, SpecError, StoreError, TrainerError
from ...store import Store
from ...store.models import ModelStore, parse_ref, validate_model_name
from .base import BaseHandler

MODEL = r"(?P<name>[^/]+)"
VERSION = r"(?P<version>[^/]+)"
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
    return [
        {
            "name": name,
            "versions": counts[name],
            "latest": row["version"],
            **{k: row[k] for k in ROW_FIELDS if k != "version"},
            "run_exists": run_exists(store, row["run_id"]),
        }
        for name, row in latest.items()
    ]


def model_versions(store: Store, name: str) -> dict[str, Any]:
    """Every version of model ``name``, newest first, each with its lineage;
    ``ModelNotFound`` naming the models there are if it has none."""
    registry = ModelStore(store.home)
    registry.version_dir(name)
    versions = []
    for row in registry.rows(name):
        found = _version(store, registry, row)
        if found is not None:
            versions.append(found)
    return {"name": name, "versions": versions}


def _version(store: Store, registry: ModelStore, row: dict[str, Any]) -> dict[str, Any] | None:
    fields = {**{k: row[k] for k in ROW_FIELDS}, "run_exists": run_exists(store, row["run_id"])}
    try:
        return {**fields, "lineage": registry.lineage(row["name"], row["version"])}
    except ModelNotFound:  # removed meanwhile
        return None
    except StoreError as exc:
        return {**fields, "lineage": {}, "damaged": str(exc)}


def model_version(store: Store, name: str, version: int) -> dict[str, Any]:
    """One version of model ``name``, as in ``model_versions``."""
    registry = ModelStore(store.home)
    registry.version_dir(name, version)
    for row in registry.rows(name):
        if row["version"] == version:
            found = _version(store, registry, row)
            if found is not None:
                return {"name": name, **found}
    raise ModelNotFound(
        f"model {name!r} version {version} is not in the index; "
        "`jupyter-trainer doctor --fix` indexes it"
    )


def version_number(name: str, text: str) -> int:
    """The version ``text`` names (a whole number from 1); else ``SpecError``."""
    _, version = parse_ref(f"{name}@{text}")
    if version is None:
        raise SpecError(f"give the number of the version of {name}, not {text!r}")
    return version


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

    @tornado.web.authenticated
    async def delete(self, name: str) -> None:
        await self._execute_guarded(self._delete(name))

    async def _delete(self, name: str) -> None:
        name = validate_model_name(name)
        if self.int_arg("all", 0, 0, 1) != 1:
            raise SpecError(
                f"DELETE models/{name} deletes every version of {name} only with "
                f"?all=1; to delete one version, DELETE models/{name}/VERSION"
            )
        await _delete(self, name, None)


class ModelVersionHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self, name: str, version: str) -> None:
        await self._execute_guarded(self._get(name, version))

    async def _get(self, name: str, version: str) -> None:
        name = validate_model_name(name)
        self.write_json(model_version(self.store, name, version_number(name, version)))

    @tornado.web.authenticated
    async def delete(self, name: str, version: str) -> None:
        await self._execute_guarded(self._delete(name, version))

    async def _delete(self, name: str, version: str) -> None:
        name = validate_model_name(name)
        await _delete(self, name, version_number(name, version))


async def _delete(handler: BaseHandler, name: str, version: int | None) -> None:
    """Delete off the event loop (a large version takes a while to remove); never
    another user's version: the REST API has no ``force``."""
    work = functools.partial(
        delete_model, name, version, all_versions=version is None, home=handler.store.home
    )
    deleted = await IOLoop.current().run_in_executor(None, work)
    handler.write_json({"name": name, "deleted": deleted})


def model_routes(base: str) -> list[tuple]:
    return [
        (url_path_join(base, "models"), ModelsHandler),
        (url_path_join(base, "models", MODEL), ModelHandler),
        (url_path_join(base, "models", MODEL, VERSION), ModelVersionHandler),
    ]
