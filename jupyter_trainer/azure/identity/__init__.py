"""``azure.identity``'s credentials, accepted and unused: a workspace here is a run store
of this machine (``$JUPYTER_TRAINER_HOME``), which needs no Azure sign-in. Each credential
takes the arguments v2's samples give it and answers ``get_token`` with an empty token, so
code that probes a credential (``credential.get_token("https://management.azure.com/.default")``)
goes on as it did."""

from __future__ import annotations

from typing import Any, NamedTuple


class AccessToken(NamedTuple):
    token: str
    expires_on: int


class _Credential:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        """No Azure sign-in is needed here: an empty token that never expires."""
        return AccessToken("", 2**31 - 1)

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> _Credential:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DefaultAzureCredential(_Credential):
    """``azure.identity.DefaultAzureCredential``: accepted, unused."""


class InteractiveBrowserCredential(_Credential):
    """``azure.identity.InteractiveBrowserCredential``: accepted, unused (no browser opens)."""


class AzureCliCredential(_Credential):
    """``azure.identity.AzureCliCredential``: accepted, unused (no ``az login`` needed)."""


class ManagedIdentityCredential(_Credential):
    """``azure.identity.ManagedIdentityCredential``: accepted, unused."""


class ClientSecretCredential(_Credential):
    """``azure.identity.ClientSecretCredential``: accepted, unused (the secret is not kept
    anywhere a run records)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()


class DeviceCodeCredential(_Credential):
    """``azure.identity.DeviceCodeCredential``: accepted, unused."""


class EnvironmentCredential(_Credential):
    """``azure.identity.EnvironmentCredential``: accepted, unused."""


class ChainedTokenCredential(_Credential):
    """``azure.identity.ChainedTokenCredential``: accepted, unused."""


__all__ = [
    "AccessToken",
    "AzureCliCredential",
    "ChainedTokenCredential",
    "ClientSecretCredential",
    "DefaultAzureCredential",
    "DeviceCodeCredential",
    "EnvironmentCredential",
    "InteractiveBrowserCredential",
    "ManagedIdentityCredential",
]
