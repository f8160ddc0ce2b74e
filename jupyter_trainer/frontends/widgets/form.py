"""The launch form behind ``%%train --form``: what it offers and how its values are checked.

The form has one typed input per hyperparameter the cell reads, starting from the value
the notebook holds when the form is shown, and is checked against that value's type (an
int stays an int, a list must be a JSON list). Launch submits the cell with the values in
the form as its params, through the same ``api.submit`` as ``%%train``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ...core.redact import redact
from ...core.spec import LAUNCHERS

KERNEL_ENV = ""  # the environment picker's value for "the kernel's own Python"
_INT = re.compile(r"\s*[+-]?\d+\s*")


def kind_of(value: Any) -> str:
    """The form's input type for a notebook value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return "json"  # None: any JSON value


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value)


def coerce(kind: str, raw: Any) -> Any:
    """The value of ``raw`` (text from the form, or a bool) as ``kind``; ValueError if not."""
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        raise ValueError("must be true or false")
    if kind == "str":
        if isinstance(raw, str):
            return raw
        raise ValueError("must be text")
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if kind == "int":
        if not _INT.fullmatch(text):
            raise ValueError("must be a whole number")
        return int(text)
    if kind == "float":
        try:
            value = float(text)
        except ValueError:
            raise ValueError("must be a number") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"must be {_JSON_WHAT[kind]}") from None
    if kind == "list" and not isinstance(value, list):
        raise ValueError(f"must be {_JSON_WHAT[kind]}")
    if kind == "dict" and not isinstance(value, dict):
        raise ValueError(f"must be {_JSON_WHAT[kind]}")
    return value


_JSON_WHAT = {
    "list": "a JSON list, e.g. [1, 2]",
    "dict": 'a JSON object, e.g. {"a": 1}',
    "json": "a JSON value",
}


def environment_choices(home: Any = None) -> list[dict[str, str]]:
    """The environment picker: the kernel's Python, then every defined environment."""
    choices = [{"value": KERNEL_ENV, "label": "(kernel)"}]
    try:
        from ...environment import list_environments
    except ImportError:
        return choices
    try:
        rows = list_environments(home=home) if home is not None else list_environments()
    except Exception:  # an environment registry that cannot be read offers the kernel only
        return choices
    for row in rows or ():
        name = row.get("name") if isinstance(row, Mapping) else getattr(row, "name", row)
        if isinstance(name, str) and name:
            version = row.get("version") if isinstance(row, Mapping) else None
            choices.append({"value": name, "label": f"{name} ({version})" if version else name})
    return choices


def target_names() -> list[str]:
    from ...targets import configured_targets

    try:
        return sorted(configured_targets(), key=lambda n: (n != "local", n))
    except Exception:
        return ["local"]


class LaunchForm:
    """What the form offers for one cell, and the launch itself (called from the widget)."""

    def __init__(
        self,
        code: str,
        namespace: Mapping[str, Any],
        options: Mapping[str, Any],
        *,
        history: list[str],
        origin: Mapping[str, Any],
        submit: Any,
    ) -> None:
        from ...capture import resolve_cell
        from ...core.spec import parse_params

        self.code = code
        self.namespace = namespace
        self.options = dict(options)
        self.history = history
        self.origin = dict(origin)
        self._submit = submit
        overrides = parse_params(list(self.options.get("params") or []))
        # Raises CaptureError now, before any form is shown, if the cell cannot travel.
        context = resolve_cell(
            code,
            namespace,
            overrides=overrides,
            history=history,
            first_line=int(self.origin.get("first_line", 1)),
        )
        self.params = dict(context.params)
        self.kinds = {name: kind_of(value) for name, value in self.params.items()}

    def schema(self) -> dict[str, Any]:
        o = self.options
        return {
            "params": [
                {"name": n, "type": self.kinds[n], "value": v, "text": as_text(v)}
                for n, v in self.params.items()
            ],
            "name": o.get("name") or "",
            "targets": target_names(),
            "target": o.get("target") or "local",
            "nodes": o.get("nodes") or 1,
            "procs": o.get("procs") or 1,
            "launchers": list(LAUNCHERS),
            "launcher": o.get("launcher") or "torchrun",
            "environments": environment_choices(),
            "environment": o.get("env") or KERNEL_ENV,
        }

    def text(self) -> str:
        shown = (  # a notebook keeps this text: no secret in it
            ", ".join(f"{n}={as_text(redact(v, n))}" for n, v in self.params.items())
            or "no parameters"
        )
        return f"launch form for a %%train cell ({shown}); click Launch to start the run"

    def check(self, values: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, str]:
        """Problems with the form's values, by field (empty when it can be launched)."""
        errors = {}
        for name, kind in self.kinds.items():
            if name not in values:
                errors[name] = f"{name} is missing"
                continue
            try:
                coerce(kind, values[name])
            except ValueError as exc:
                errors[name] = f"{name} {exc}"
        for key in ("nodes", "procs"):
            text = str(options.get(key, "1"))
            if not text.strip().isdigit() or int(text) < 1:
                errors[key] = f"{key} must be a whole number ≥ 1"
        unknown = sorted(set(values) - set(self.kinds))
        if unknown:
            errors["_"] = f"unknown parameters: {', '.join(unknown)}"
        return errors

    def launch_arguments(
        self, values: Mapping[str, Any], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``api.submit`` keyword arguments for checked form values: every option of the
        ``%%train`` line (``submit_kwargs``), with the fields the form shows as entered."""
        params = {name: coerce(kind, values[name]) for name, kind in self.kinds.items()}
        base = self.options
        return {
            **base,
            "name": (options.get("name") or "").strip() or base.get("name"),
            "target": options.get("target") or base.get("target") or "local",
            "nodes": int(options.get("nodes", base.get("nodes") or 1)),
            "procs": int(options.get("procs", base.get("procs") or 1)),
            "launcher": options.get("launcher") or base.get("launcher") or "torchrun",
            "env": options.get("env") or None,
            "params": params,
        }

    def submit(self, values: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
        """Start the run with the form's values; they become the run's params."""
        return self._submit(
            self.code,
            namespace=self.namespace,
            history=self.history,
            origin=self.origin,
            **self.launch_arguments(values, options),
        )
