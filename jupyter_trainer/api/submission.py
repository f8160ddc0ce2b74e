"""What a submission becomes before anything is written: its flags checked, its target
found, and ``write(staging) -> RunSpec``, which captures the snapshot once the run's folder
is being made (``run_writer``); with the rules that a submission's defaults follow (when a
run is hot by default, how an MLflow URI is made absolute, what ``params`` may be).

``submit`` (runs.py) and a sweep's template (sweeps/functions.py) both start here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from .. import environment
from ..core.errors import SpecError
from ..core.spec import (
    DEFAULT_SYSTEM_INTERVAL,
    LaunchSpec,
    RunSpec,
    TargetSpec,
    WatchSpec,
    debug_limit,
    parse_params,
)
from ..store import Store
from ..targets import get_target
from ..targets.base import Target
from .start import submitter


def first_line(origin: Mapping[str, Any] | None) -> int:
    """The editor's number of the cell's first line, ``origin["first_line"]``: 2 for a cell
    under ``%%train``; line numbers in errors and tracebacks count from it."""
    value = (origin or {}).get("first_line", 1)
    if type(value) is not int or not 1 <= value <= 1000:
        raise SpecError(f"origin first_line must be a line number from 1 to 1000, got {value!r}")
    return value


_PLACEHOLDER = re.compile(r"\$\{\{\s*(\w*)\.?([^}\s]*)\s*\}\}")


def check_placeholders(args: Sequence[str], data: Sequence[str], params: Sequence[str]) -> None:
    """Each ``${{data.NAME}}`` in a script's arguments (replaced on each node by the path of
    the data input NAME) names an input of the run, each ``${{params.NAME}}`` (replaced by
    the param's value) a param, and both are written exactly so; ``${{env.NAME}}`` is the
    rank's environment variable NAME (a v1 job's ``$NAME``)."""
    for arg in args:
        for match in _PLACEHOLDER.finditer(str(arg)):
            kind, name = match.group(1), match.group(2)
            if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                continue
            if match.group(0) == "${{checkpoint.latest}}":  # the run's newest, or ""
                continue
            if kind not in ("data", "params"):
                raise SpecError(
                    f"argument {arg!r} holds {match.group(0)}: write ${{{{data.NAME}}}} (the "
                    "path of a data input), ${{params.NAME}} (the value of a param), "
                    "${{env.NAME}} (an environment variable of the rank) or "
                    "${{checkpoint.latest}} (the run's newest checkpoint)"
                )
            names = data if kind == "data" else params
            if match.group(0) == f"${{{{{kind}.{name}}}}}" and name in names:
                continue
            what = "data inputs" if kind == "data" else "params"
            flag = "--data NAME=PATH" if kind == "data" else "--param NAME=VALUE"
            raise SpecError(
                f"argument {arg!r} refers to {match.group(0)}, but the run's {what} are: "
                f"{', '.join(sorted(names)) or 'none'}; add {flag.replace('NAME', name or 'NAME')}"
                ", or name one of them"
            )


def run_writer(
    code: str | None,
    *,
    script: str | os.PathLike[str] | None,
    args: Sequence[str],
    name: str | None,
    target: str,
    nodes: int,
    procs: int,
    launcher: str,
    backend: str | None,
    env: str | None,
    params: dict[str, Any],
    source: str | os.PathLike[str] | None,
    max_restarts: int,
    stall_timeout: float,
    on_stall: str,
    stop_on_nan: str | Sequence[str],
    namespace: Mapping[str, Any] | None,
    history: Sequence[str],
    home: str | os.PathLike[str] | None,
    origin: Mapping[str, Any] | None,
    data: Mapping[str, str | os.PathLike[str]] | Sequence[str] | None = None,
    mlflow: str | None = None,
    hot: bool | None = None,
    dry_run: bool = False,
    notes: list[str] | None = None,
    system_interval: float = DEFAULT_SYSTEM_INTERVAL,
    autolog: bool = True,
    debug: bool | float = False,
    storage: str | None = None,
) -> tuple[Store, Target, Callable[[Path], RunSpec]]:
    """The store, the target and ``write(staging) -> RunSpec`` (which captures the snapshot)
    of a run of ``code`` or ``script``: checked, but nothing written yet. With ``dry_run``
    URL inputs are not downloaded (``notes`` says so)."""
    from .. import capture  # lazy: keeps ``import jupyter_trainer`` cheap

    if (code is None) == (script is None):
        raise SpecError("give either the code of a cell or a script path, not both")
    if hot is not None and type(hot) is not bool:
        raise SpecError(f"hot must be True, False or None (the default), got {hot!r}")
    launch = LaunchSpec(
        launcher=launcher,
        nodes=nodes,
        procs=procs,
        backend=backend,
        max_restarts=max_restarts,
        hot=bool(hot),
    )
    watch = WatchSpec(
        stall_timeout=stall_timeout,
        on_stall=on_stall,
        stop_on_nan=(stop_on_nan,) if isinstance(stop_on_nan, str) else tuple(stop_on_nan),
        system_interval=system_interval,
        autolog=autolog,
        debug=debug_limit(debug),
    )
    overrides = params
    line_one = first_line(origin)
    store = Store(home)
    tgt = get_target(TargetSpec(target).name, store.home)
    holds = bool(getattr(tgt, "holds", False))
    if hot and tgt.kind == "slurm" and not holds:
        raise SpecError(
            f"--hot on Slurm needs an allocation kept between runs: set hold = "
            f"SECONDS (say 1800) in target {target!r}, or drop --hot"
        )
    if hot and tgt.kind not in HOT_KINDS:
        raise SpecError(
            f"--hot forks ranks from a pool on this machine, ssh hosts or a held "
            f"Slurm allocation; it works on a local, ssh or slurm target only "
            f"({target!r} is {tgt.kind}): drop --hot"
        )
    if hot and tgt.kind == "local" and launch.nodes != 1:
        raise SpecError(
            f"--hot runs on the local target with one node; drop --hot for --nodes {launch.nodes}"
        )
    if hot is None and hot_by_default(tgt.kind, launch, holds):
        launch = dataclasses.replace(launch, hot=True)
    env_spec = environment.resolve(env, home=store.home)
    source_dir = Path(source).expanduser() if source is not None else None
    script_path = Path(script).expanduser() if script is not None else None
    from ..inputs import parse_inputs, resolve_inputs  # lazy: hashing and fetching when asked

    check_placeholders(args, list(parse_inputs(data)), list(params))
    # a missing or unreadable input stops here; a URL is downloaded (not in a dry run)
    inputs = resolve_inputs(data, home=store.home, dry_run=dry_run, notes=notes)
    mlflow = tracking_uri(
        mlflow if mlflow is not None else os.environ.get("MLFLOW_TRACKING_URI") or None
    )
    from ..store import object_storage  # lazy: fsspec only for a run with storage

    # the run's own, its target's or the workspace's; unreachable or refused stops here
    storage = object_storage.for_submit(
        object_storage.resolve(storage, tgt, store.home), store.home
    )

    def write(staging: Path) -> RunSpec:
        if code is not None:
            context = capture.resolve_cell(
                code, namespace or {}, overrides=overrides, history=history, first_line=line_one
            )
            code_spec = capture.write_cell_snapshot(
                staging, code, context, source_dir=source_dir, first_line=line_one
            )
            run_params, carried = context.params, context.carried_names
        elif script_path is not None:
            code_spec = capture.write_script_snapshot(
                staging, script_path, args, source_dir=source_dir
            )
            run_params, carried = overrides, ()
        else:  # refused above: one of them is given
            raise SpecError("give either the code of a cell or a script path")
        return RunSpec(
            name=name or (script_path.stem if script_path is not None else "cell"),
            code=code_spec,
            launch=launch,
            target=TargetSpec(target, price=dict(tgt.price)),
            env=env_spec,
            params=run_params,
            carried=carried,
            watch=watch,
            origin={**submitter(), **(origin or {})},
            data=inputs,
            mlflow=mlflow,
            storage=storage,
        )

    return store, tgt, write


HOT_ENV = "JT_HOT"  # 0 turns the warm pool off where it would be the default
HOT_KINDS = ("local", "ssh", "slurm")  # targets whose ranks a warm pool can fork


def hot_by_default(kind: str, launch: LaunchSpec, holds: bool = False) -> bool:
    """Whether a run that does not say ``hot`` uses the warm pool: torchrun without restarts,
    on the local target (one node), an ssh target (any nodes) or a Slurm target that holds
    an allocation between runs (``holds``), unless ``$JT_HOT`` is 0."""
    value = os.environ.get(HOT_ENV, "").strip().lower()
    if value not in ("", "0", "1", "false", "true", "no", "yes", "off", "on"):
        raise SpecError(
            f"${HOT_ENV}={value!r} is not a switch: set it to 0 (plain torchrun "
            f"where a run does not ask for --hot) or 1, or unset it"
        )
    if value in ("0", "false", "no", "off"):
        return False
    return (
        kind in HOT_KINDS
        and launch.launcher == "torchrun"
        and not launch.max_restarts
        and (kind != "local" or launch.nodes == 1)
        and (kind != "slurm" or holds)
    )


def tracking_uri(uri: str | None) -> str | None:
    """An MLflow tracking URI as the supervisor will use it: a relative local path
    (``sqlite:///mlflow.db``, ``file:mlruns``, ``mlruns``) made absolute here, where the
    notebook or shell that named it runs, since the supervisor runs elsewhere."""
    if not uri:
        return None
    for prefix in ("sqlite:///", "file://", "file:"):
        if uri.startswith(prefix):
            rest = uri[len(prefix) :]
            if (prefix == "sqlite:///" and rest.startswith("/")) or prefix == "file://":
                return uri
            return f"{prefix if prefix == 'sqlite:///' else 'file:'}{os.path.abspath(rest)}"
    if ":" not in uri and ("/" in uri or uri.startswith((".", "~")) or os.path.exists(uri)):
        return os.path.abspath(os.path.expanduser(uri))
    return uri  # a server, or a name MLflow resolves itself (databricks)


def given_params(params: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` strings (as ``-p`` gives them) or a mapping, as a dict."""
    if is_flag_list(params):
        return parse_params(list(params))
    if isinstance(params, Mapping):
        return dict(params)
    if not params:
        return {}
    raise SpecError(
        f"params must be a mapping or KEY=VALUE strings (as -p gives them), got {params!r}"
    )


def is_flag_list(params: object) -> TypeGuard[list[str] | tuple[str, ...]]:
    """Whether ``params`` are strings as repeated flags give them (``-p``, ``--sweep``)."""
    return isinstance(params, (list, tuple)) and all(isinstance(p, str) for p in params)
