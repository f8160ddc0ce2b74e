"""``azureml.core.Workspace``: a run store of jupyter_trainer (``$JUPYTER_TRAINER_HOME``,
``~/.jupyter_trainer`` by default) seen as a v1 workspace.

``Workspace.from_config()`` reads a v1 ``config.json`` where there is one (its
``workspace_name`` is the workspace's name; a ``jupyter_trainer_home`` key, when present,
chooses the store) and needs none. The Azure identifiers v1 took are kept as given and not
used; they are strings, empty when not given, as v1's always were (its samples print them with
``+``). ``compute_targets`` are the targets of ``targets.toml``, ``datasets`` the registered
datasets, ``models`` the registry's latest versions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...rankside.host.home import default_home
from ..errors import NotSupported, UserErrorException
from .compute import ComputeTarget
from .dataset import Dataset, Datastore, FileDataset
from .environment import Environment

CONFIG_NAMES = ("config.json", ".azureml/config.json", "aml_config/config.json")


class Workspace:
    def __init__(
        self,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        workspace_name: str | None = None,
        auth: Any = None,
        _location: str | None = None,
        _disable_service_check: bool = False,
        _workspace_id: str | None = None,
        sku: str = "basic",
        tags: Any = None,
        _cloud: str = "AzureCloud",
        home: str | Path | None = None,
    ) -> None:
        self.subscription_id = subscription_id or ""
        self.resource_group = resource_group or ""
        self.home = Path(home).expanduser() if home else default_home()
        self.name = workspace_name or self.home.name
        self.location = _location or "local"
        self.sku = sku
        self.tags = dict(tags or {})
        self._environments: dict[str, Environment] = {}

    def __repr__(self) -> str:
        return f"Workspace.create(name='{self.name}', home='{self.home}')"

    @staticmethod
    def from_config(
        path: str | None = None,
        auth: Any = None,
        _logger: Any = None,
        _file_name: str | None = None,
    ) -> Workspace:
        """The workspace a v1 ``config.json`` names, searched for from ``path`` (default: the
        current folder) up to the root; without one, the default store."""
        found = _find_config(Path(path or ".").expanduser(), _file_name)
        if found is None:
            return Workspace()
        try:
            data = json.loads(found.read_text())
        except (OSError, ValueError) as exc:
            raise UserErrorException(f"{found} is not a readable JSON file: {exc}") from None
        return Workspace(
            data.get("subscription_id"),
            data.get("resource_group"),
            data.get("workspace_name"),
            home=data.get("jupyter_trainer_home"),
        )

    @staticmethod
    def get(
        name: str,
        auth: Any = None,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        location: str | None = None,
        cloud: str = "AzureCloud",
        id: str | None = None,
    ) -> Workspace:
        return Workspace(subscription_id, resource_group, name)

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> Workspace:
        raise NotSupported(
            "Workspace.create",
            "a workspace here is a run store, which exists once a run or a target is there: "
            "use Workspace() or Workspace.from_config()",
        )

    def delete(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported("Workspace.delete", f"remove the run store {self.home} yourself")

    def write_config(self, path: str | None = None, file_name: str | None = None) -> None:
        folder = Path(path or ".").expanduser() / ".azureml"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / (file_name or "config.json")).write_text(
            json.dumps(
                {
                    "subscription_id": self.subscription_id,
                    "resource_group": self.resource_group,
                    "workspace_name": self.name,
                    "jupyter_trainer_home": str(self.home),
                },
                indent=1,
            )
        )

    def get_details(self) -> dict[str, Any]:
        return {"name": self.name, "location": self.location, "home": str(self.home)}

    @property
    def compute_targets(self) -> dict[str, ComputeTarget]:
        return {t.name: t for t in ComputeTarget.list(self)}

    @property
    def datasets(self) -> dict[str, FileDataset]:
        return Dataset.get_all(self)

    @property
    def environments(self) -> dict[str, Environment]:
        return dict(self._environments)

    @property
    def datastores(self) -> dict[str, Datastore]:
        root = self.home / "datastore"
        names = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
        return {name: Datastore(self, name) for name in sorted(names | {"workspaceblobstore"})}

    def get_default_datastore(self) -> Datastore:
        return Datastore(self)

    @property
    def models(self) -> dict[str, Any]:
        from .model import Model

        return {m.name: m for m in Model.list(self)}

    @property
    def experiments(self) -> dict[str, Any]:
        from .experiment import Experiment, experiment_names

        return {name: Experiment(self, name) for name in experiment_names(self)}

    def get_run(self, run_id: str) -> Any:
        from .experiment import Experiment
        from .run import Run

        return Run(Experiment(self, _experiment_of(self, run_id)), run_id)


def _experiment_of(workspace: Workspace, run_id: str) -> str:
    from ...api import runs as api
    from .experiment import experiment_of

    return experiment_of(api.get_run(run_id, home=workspace.home).spec.origin) or "runs"


def _find_config(start: Path, file_name: str | None) -> Path | None:
    if start.is_file():
        return start
    names = (file_name,) if file_name else CONFIG_NAMES
    for folder in (start.resolve(), *start.resolve().parents):
        for name in names:
            candidate = folder / name if name else None
            if candidate is not None and candidate.is_file():
                return candidate
    return None


__all__ = ["Workspace"]
