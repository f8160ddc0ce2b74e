"""``azureml.core.authentication``: how v1 signed in to Azure. Nothing here signs in to
anything (a workspace is a run store), so each class takes v1's arguments and keeps none of
them: a service principal's secret is not stored anywhere."""

from __future__ import annotations

from typing import Any


class AbstractAuthentication:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_authentication_header(self) -> dict[str, str]:
        return {}


class InteractiveLoginAuthentication(AbstractAuthentication):
    pass


class ServicePrincipalAuthentication(AbstractAuthentication):
    pass


class MsiAuthentication(AbstractAuthentication):
    pass


class AzureCliAuthentication(AbstractAuthentication):
    pass


class TokenAuthentication(AbstractAuthentication):
    pass


__all__ = [
    "AbstractAuthentication",
    "AzureCliAuthentication",
    "InteractiveLoginAuthentication",
    "MsiAuthentication",
    "ServicePrincipalAuthentication",
    "TokenAuthentication",
]
