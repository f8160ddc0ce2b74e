"""``azureml.core.webservice``: deployment, which is outside jupyter_trainer. Every class and
its ``deploy_configuration`` raise ``NotSupported`` naming the call and what to do instead,
before anything starts."""

from __future__ import annotations

from typing import Any

from ..errors import NotSupported
from .model import DEPLOY_FIX


class Webservice:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotSupported(type(self).__name__, DEPLOY_FIX)

    @classmethod
    def deploy_configuration(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{cls.__name__}.deploy_configuration", DEPLOY_FIX)

    @classmethod
    def list(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSupported(f"{cls.__name__}.list", DEPLOY_FIX)


class AciWebservice(Webservice):
    pass


class AksWebservice(Webservice):
    pass


class LocalWebservice(Webservice):
    pass


__all__ = ["AciWebservice", "AksWebservice", "LocalWebservice", "Webservice"]
