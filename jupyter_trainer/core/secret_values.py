"""A run's secret params, environment variables and script arguments: which they are, their
values for the run's owner-only ``secrets.json`` (``rankside/rank/run_secrets.py``), and a spec
read back from ``spec.json`` (which records them redacted) with its real values put back.

``RunSpec.secrets`` names them as ``params.NAME``, ``variables.NAME`` and ``args.N``;
``spec.json`` records the values of params and variables redacted (``core.redact``), and a
secret argument as ``${{secret.N}}`` (after its ``--name=``, if it has one), which the rank
replaces with the real value (``rankside/rank/script_args.py``). So the launchers' command lines,
which every user of the machine may read (``ps``), never hold one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from ..rankside.redaction.secret_names import secret_name
from .redact import holds_secret, redact_text

SECRET_ARG = "${{{{secret.{}}}}}"  # .format(N): the placeholder of script argument N


class RunSpec(Protocol):
    """What of ``core.spec.RunSpec`` these read (that module imports this one)."""

    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def env(self) -> Any: ...
    @property
    def secrets(self) -> tuple[str, ...]: ...
    @property
    def code(self) -> Any: ...


S = TypeVar("S", bound=RunSpec)
Values = Mapping[str, Mapping[str, Any]]  # {"params": {...}, "variables": {...}, "args": ...}


def secret_entries(
    params: Mapping[str, Any], variables: Mapping[str, str], args: tuple[str, ...] = ()
) -> list[str]:
    """``params.NAME``, ``variables.NAME`` and ``args.N`` of the values that hold a secret."""
    found = [f"params.{k}" for k, v in params.items() if holds_secret(v, k)]
    found += [f"variables.{k}" for k, v in variables.items() if holds_secret(v, k)]
    return found + [f"args.{n}" for n in secret_args(args)]


def secret_args(args: tuple[str, ...] | list[str]) -> dict[int, tuple[str, str]]:
    """``{N: (prefix, value)}`` of the script arguments that hold a secret: the value of a
    secret's option (``--hf-token VALUE``, ``--password=VALUE``: the prefix is ``--password=``)
    and an argument that shows one by its shape (a token, a URL with a password)."""
    found = {}
    for n, arg in enumerate(args):
        if "${{" in arg:  # a placeholder: its value is the rank's to fill in
            continue
        name, eq, value = arg.partition("=")
        before = args[n - 1] if n else ""
        if (
            arg.startswith("-")
            and eq
            and value
            and (secret_name(name.lstrip("-")) or redact_text(value) != value)
        ):
            found[n] = (name + eq, value)
        elif (
            not arg.startswith("-")
            and before.startswith("-")
            and "=" not in before
            and secret_name(before.lstrip("-"))
        ) or redact_text(arg) != arg:
            found[n] = ("", arg)
    return found


def recorded_args(args: tuple[str, ...], secrets: tuple[str, ...]) -> list[str]:
    """``args`` as ``spec.json`` records them: each secret one as its placeholder."""
    hidden = secret_args(args)
    return [
        hidden[n][0] + SECRET_ARG.format(n) if f"args.{n}" in secrets and n in hidden else arg
        for n, arg in enumerate(args)
    ]


def secret_values(spec: RunSpec) -> dict[str, dict[str, Any]]:
    """The values of ``spec.secrets`` as ``spec`` holds them (the real ones in a spec about
    to be made): ``{"params": {...}, "variables": {...}, "args": {"N": value}}``."""
    out: dict[str, dict[str, Any]] = {"params": {}, "variables": {}, "args": {}}
    hidden = secret_args(spec.code.args)
    for entry in spec.secrets:
        kind, _, name = entry.partition(".")
        if kind == "args":
            if name.isdigit() and int(name) in hidden:
                out["args"][name] = hidden[int(name)][1]
            continue
        where = spec.params if kind == "params" else spec.env.variables
        if kind in out and name in where:
            out[kind][name] = where[name]
    return out


def with_secret_values(spec: S, values: Values) -> S:
    """``spec`` with the real values of its redacted params, variables and arguments
    (``values`` as the owner-only file holds them)."""
    variables = {**spec.env.variables, **values.get("variables", {})}
    args = list(spec.code.args)
    for n, value in values.get("args", {}).items():
        if n.isdigit() and int(n) < len(args):
            args[int(n)] = args[int(n)].replace(SECRET_ARG.format(n), str(value))
    return replace(  # type: ignore[type-var]
        spec,
        params={**spec.params, **values.get("params", {})},
        env=replace(spec.env, variables=variables),
        code=replace(spec.code, args=tuple(args)),
    )


def missing_secrets(spec: RunSpec, values: Values) -> list[str]:
    """The entries of ``spec.secrets`` that ``values`` holds no real value for."""
    return [
        entry
        for entry in spec.secrets
        if entry.partition(".")[2] not in values.get(entry.partition(".")[0], {})
    ]
