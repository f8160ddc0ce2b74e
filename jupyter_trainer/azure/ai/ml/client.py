"""``azure.ai.ml.MLClient``: a run store of jupyter_trainer (``$JUPYTER_TRAINER_HOME``,
``~/.jupyter_trainer`` by default) seen as a v2 workspace.

``MLClient.from_config(credential)`` reads v2's ``config.json`` (searched for from ``path``,
by default the current folder, up to the root, also in ``.azureml/``) where there is one: its
``workspace_name`` is the workspace's name, a ``jupyter_trainer_home`` key chooses the store.
The constructor takes the subscription, resource group and workspace as v2's does; they are
kept and not used, and so is the credential. ``jobs`` and ``models`` work here;
``environments`` registers environments by name for this client; ``compute`` lists the
targets; endpoints, pipelines' components, data assets and schedules are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ....azureml.core.compute import ComputeTarget
from ....azureml.core.workspace import Workspace as V1Workspace
from .entities.environment import Environment
from .entities.model import Model
from .exceptions import ValidationException
from .job_operations import JobOperations
from .model_operations import ModelOperations
from .refused import OPERATIONS, RefusedOperations


class EnvironmentOperations:
    def __init__(self, client: MLClient) -> None:
        self._client = client

    def create_or_update(self, environment: Environment) -> Environment:
        """Keep it by name for this client's jobs (``environment="NAME@latest"``), checking
        its packages now."""
        if not isinstance(environment, Environment) or not environment.name:
            raise ValidationException("environments.create_or_update takes Environment(name=...)")
        v1 = environment.v1()
        v1.definition(self._client.workspace.home)
        self._client._environments[environment.name] = environment
        return environment

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Environment:
        found = self._client._environments.get(name)
        if found is None:
            return Environment(name=name)  # a curated name: resolved when a job uses it
        return found

    def list(self, **kwargs: Any) -> list[Environment]:
        return list(self._client._environments.values())


class Compute:
    """A target of ``targets.toml`` seen as v2's compute: ``name``, ``type`` (the target's
    kind), ``size`` (empty: a target here has no VM size)."""

    def __init__(self, target: ComputeTarget) -> None:
        self.name = target.name
        self.type = str(getattr(target, "type", "") or "")
        self.size = ""
        self.provisioning_state = "Succeeded"

    def __repr__(self) -> str:
        return f"Compute(name={self.name!r}, type={self.type!r})"


class ComputeOperations:
    def __init__(self, client: MLClient) -> None:
        self._client = client

    def get(self, name: str) -> Compute:
        """The target ``name``; ``ComputeTargetException`` naming how to add it if absent
        (v2's samples catch it and make an ``AmlCompute``, which is refused with the same
        fix)."""
        return Compute(ComputeTarget(self._client.workspace, name))

    def list(self, **kwargs: Any) -> list[Compute]:
        return [Compute(t) for t in ComputeTarget.list(self._client.workspace)]

    def begin_create_or_update(self, *args: Any, **kwargs: Any) -> Any:
        from .exceptions import refuse
        from .refused import COMPUTE

        raise refuse("ml_client.compute.begin_create_or_update", COMPUTE)


class WorkspaceInfo:
    """What ``ml_client.workspaces.get(NAME)`` gives v2's samples: the workspace's ``name``,
    ``resource_group``, ``location`` and an Azure-shaped ``id``."""

    def __init__(self, client: MLClient) -> None:
        self.name = client.workspace_name
        self.resource_group = client.resource_group_name
        self.location = "local"
        self.id = (
            f"/subscriptions/{client.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.MachineLearningServices/workspaces/{self.name}"
        )


class WorkspaceOperations:
    def __init__(self, client: MLClient) -> None:
        self._client = client

    def get(self, name: str | None = None, **kwargs: Any) -> WorkspaceInfo:
        return WorkspaceInfo(self._client)

    def list(self, **kwargs: Any) -> list[WorkspaceInfo]:
        return [WorkspaceInfo(self._client)]

    def __getattr__(self, attr: str) -> Any:
        return getattr(RefusedOperations("workspaces"), attr)


class MLClient:
    def __init__(
        self,
        credential: Any = None,
        subscription_id: str | None = None,
        resource_group_name: str | None = None,
        workspace_name: str | None = None,
        *,
        home: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        self.subscription_id = subscription_id or ""
        self.resource_group_name = resource_group_name or ""
        self.workspace = V1Workspace(
            subscription_id, resource_group_name, workspace_name, home=home
        )
        self.workspace_name = self.workspace.name
        self._environments: dict[str, Environment] = {}
        self.jobs = JobOperations(self)
        self.models = ModelOperations(self)
        self.environments = EnvironmentOperations(self)
        self.compute = ComputeOperations(self)
        self.workspaces = WorkspaceOperations(self)

    def __repr__(self) -> str:
        return (
            f"MLClient(workspace_name={self.workspace_name!r}, home={str(self.workspace.home)!r})"
        )

    def __getattr__(self, name: str) -> Any:
        if name in OPERATIONS:
            return RefusedOperations(name)
        raise AttributeError(f"MLClient has no attribute {name!r}")

    def create_or_update(self, entity: Any, **kwargs: Any) -> Any:
        """v2's generic create: a job goes to ``jobs``, a model to ``models``, an
        environment to ``environments``."""
        if isinstance(entity, Model):
            return self.models.create_or_update(entity)
        if isinstance(entity, Environment):
            return self.environments.create_or_update(entity)
        return self.jobs.create_or_update(entity, **kwargs)

    begin_create_or_update = create_or_update

    def experiment_name(self) -> str:
        """The name a job without ``experiment_name`` is grouped under, as v2 named it after
        the notebook's folder."""
        name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in Path.cwd().name)
        return name.strip("-._") or "jobs"

    @classmethod
    def from_config(
        cls,
        credential: Any = None,
        *,
        path: str | Path | None = None,
        file_name: str | None = None,
        **kwargs: Any,
    ) -> MLClient:
        """The workspace a v2 ``config.json`` names (see the module's docstring); without
        one, the default store."""
        found = find_config(Path(path or ".").expanduser(), file_name)
        if found is None:
            return cls(credential)
        try:
            data = json.loads(found.read_text())
        except (OSError, ValueError) as exc:
            raise ValidationException(f"{found} is not a readable JSON file: {exc}") from None
        if not isinstance(data, dict):
            raise ValidationException(f"{found}: a JSON object with workspace_name")
        return cls(
            credential,
            data.get("subscription_id"),
            data.get("resource_group"),
            data.get("workspace_name"),
            home=data.get("jupyter_trainer_home"),
        )


def find_config(start: Path, file_name: str | None = None) -> Path | None:
    """v2's search for the workspace's config file: ``start`` itself if it is a file, else
    ``config.json`` (or ``file_name``) in ``start``, its ``.azureml/``, and each parent's."""
    if start.is_file():
        return start
    name = file_name or "config.json"
    for folder in (start.resolve(), *start.resolve().parents):
        for candidate in (folder / name, folder / ".azureml" / name):
            if candidate.is_file():
                return candidate
    return None


__all__ = ["MLClient"]
