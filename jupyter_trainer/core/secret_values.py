"""A run's secret params and environment variables: which they are, their values for the
run's owner-only ``secrets.json`` (``rankside/run_secrets.py``), and a spec read back from
``spec.json`` (which records them redacted) with its real values put back.

``RunSpec.secrets`` names them as ``params.NAME`` and ``variables.NAME``; ``spec.json``
records their values redacted (``core.redact``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from .redact import holds_secret


class RunSpec(Protocol):
    """What of ``core.spec.RunSpec`` these read (that module imports this one)."""

    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def env(self) -> Any: ...
    @property
    def secrets(self) -> tuple[str, ...]: ...


S = TypeVar("S", bound=RunSpec)
Values = Mapping[str, Mapping[str, Any]]  # {"params": {...}, "variables": {...}}


def secret_entries(params: Mapping[str, Any], variables: Mapping[str, str]) -> list[str]:
    """``params.NAME`` and ``variables.NAME`` of the values that hold a secret."""
    found = [f"params.{k}" for k, v in params.items() if holds_secret(v, k)]
    return found + [f"variables.{k}" for k, v in variables.items() if holds_secret(v, k)]


def secret_values(spec: RunSpec) -> dict[str, dict[str, Any]]:
    """The values of ``spec.secrets`` as ``spec`` holds them (the real ones in a spec about
    to be made): ``{"params": {...}, "variables": {...}}``."""
    out: dict[str, dict[str, Any]] = {"params": {}, "variables": {}}
    for entry in spec.secrets:
        kind, _, name = entry.partition(".")
        where = spec.params if kind == "params" else spec.env.variables
        if kind in out and name in where:
            out[kind][name] = where[name]
    return out


def with_secret_values(spec: S, values: Values) -> S:
    """``spec`` with the real values of its redacted params and variables (``values`` as
    the owner-only file holds them)."""
    variables = {**spec.env.variables, **values.get("variables", {})}
    return replace(  # type: ignore[type-var]
        spec,
        params={**spec.params, **values.get("params", {})},
        env=replace(spec.env, variables=variables),
    )


def missing_secrets(spec: RunSpec, values: Values) -> list[str]:
    """The entries of ``spec.secrets`` that ``values`` holds no real value for."""
    return [
        entry
        for entry in spec.secrets
        if entry.partition(".")[2] not in values.get(entry.partition(".")[0], {})
    ]
