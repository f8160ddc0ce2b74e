"""``azureml.core.compute``: a compute target is a target of ``targets.toml``, by name.

``ComputeTarget(workspace=ws, name="gpu-cluster")`` finds the target named ``gpu-cluster``
(``local`` always exists), or raises ``ComputeTargetException`` as v1 did for a missing one,
with the command that adds it. Provisioning Azure compute (``AmlCompute``,
``ComputeInstance``) has no counterpart: a target is added once with
``jupyter-trainer target add``.
"""

from __future__ import annotations

from typing import Any

from ...targets.registry import configured_targets, targets_file
from ..errors import ADD_TARGET, ComputeTargetException, NotSupported


class ComputeTarget:
    """A target of ``targets.toml``: ``name``, ``type`` (its kind) and its configuration."""

    def __init__(self, workspace: Any = None, name: str | None = None) -> None:
        if name is None:
            raise ComputeTargetException("ComputeTarget(workspace, name) needs the target's name")
        home = getattr(workspace, "home", None)
        targets = configured_targets(home)
        if name not in targets:
            raise ComputeTargetException(
                f"ComputeTargetNotFound: no compute target named {name!r}; the targets are "
                f"{', '.join(sorted(targets))} ({targets_file(home)}). To use your own "
                f"cluster, {ADD_TARGET.replace('NAME', name)}"
            )
        self.name = name
        self.workspace = workspace
        self.config = dict(targets[name])
        self.type = str(self.config.get("kind", "local"))
        self.provisioning_state = "Succeeded"

    def __repr__(self) -> str:
        return f"ComputeTarget(name={self.name!r}, type={self.type!r})"

    @staticmethod
    def create(workspace: Any, name: str, provisioning_configuration: Any) -> ComputeTarget:
        raise NotSupported(
            f"ComputeTarget.create({name!r}, ...)", ADD_TARGET.replace("NAME", str(name))
        )

    @staticmethod
    def attach(workspace: Any, name: str, attach_configuration: Any) -> ComputeTarget:
        raise NotSupported(
            f"ComputeTarget.attach({name!r}, ...)", ADD_TARGET.replace("NAME", str(name))
        )

    @staticmethod
    def list(workspace: Any) -> list[ComputeTarget]:
        home = getattr(workspace, "home", None)
        return [ComputeTarget(workspace, name) for name in sorted(configured_targets(home))]

    def wait_for_completion(self, show_output: bool = False, **kwargs: Any) -> None:
        """A target here exists once it is in targets.toml: nothing to wait for."""

    def get_status(self) -> ComputeStatus:
        """``"Succeeded"``, as v1 said of a ready target, with v1's ``serialize()`` (its
        samples print ``get_status().serialize()``)."""
        return ComputeStatus(self)

    def delete(self) -> None:
        raise NotSupported("ComputeTarget.delete", self._remove())

    def detach(self) -> None:
        raise NotSupported("ComputeTarget.detach", self._remove())

    def _remove(self) -> str:
        home = getattr(self.workspace, "home", None)
        return f"remove [targets.{self.name}] from {targets_file(home)}"


class _Provisioned:
    """A kind of Azure compute this project cannot create."""

    kind = "AmlCompute"

    @classmethod
    def provisioning_configuration(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{cls.kind}.provisioning_configuration", ADD_TARGET)

    @classmethod
    def attach_configuration(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{cls.kind}.attach_configuration", ADD_TARGET)

    @classmethod
    def supported_vmsizes(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{cls.kind}.supported_vmsizes", "a target's nodes are what it names")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported(f"{self.kind}(...)", ADD_TARGET)


class AmlCompute(_Provisioned):
    kind = "AmlCompute"


class ComputeInstance(_Provisioned):
    kind = "ComputeInstance"


class AksCompute(_Provisioned):
    kind = "AksCompute"


class RemoteCompute(_Provisioned):
    kind = "RemoteCompute"


__all__ = [
    "AksCompute",
    "AmlCompute",
    "ComputeInstance",
    "ComputeTarget",
    "ComputeTargetException",
    "RemoteCompute",
]


class ComputeStatus(str):
    """A ready target's status: the text ``"Succeeded"``, with what v1's status objects
    said of it through ``serialize()``."""

    def __new__(cls, target: ComputeTarget) -> ComputeStatus:
        made = super().__new__(cls, target.provisioning_state)
        made.target = target
        return made

    target: ComputeTarget

    @property
    def provisioning_state(self) -> str:
        return str(self)

    def serialize(self) -> dict[str, Any]:
        return {
            "name": self.target.name,
            "type": self.target.type,
            "provisioningState": str(self),
            "provisioningErrors": None,
        }
