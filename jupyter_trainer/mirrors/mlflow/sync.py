"""Mirroring in a child process with a time limit, and its record in the run's state.

``sync`` starts ``python -m jupyter_trainer.mirrors.mlflow worker RUN --uri URI ...``, which
mirrors the run (``mirror.Mirror``) and stops itself after ``$JT_MLFLOW_TIMEOUT`` seconds
(default 120); the caller kills it ``GRACE_S`` later if it has not. So a slow, hanging or absent
server costs a bounded time, MLflow is never imported into a notebook's kernel, and the child's
environment (not the caller's) gets MLflow's HTTP retries cut to one and its request timeout
to 30 s unless they are set.

The result is ``state["mlflow"]``: ``{"uri", "status": "synced" | "failed", "error",
"mlflow_run_id", "at", ...counts}``, written only into the state of a run that has ended (the
supervisor writes a live run's state; it mirrors the run again once it ends).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from ...core.errors import MissingExtra, SpecError, TrainerError
from ...rankside.host.home import HOME_ENV
from ...store import TERMINAL, Store, read_json
from .mirror import EXTRA

LIMIT_ENV = "JT_MLFLOW_TIMEOUT"
DEFAULT_LIMIT_S = 120.0
GRACE_S = 15.0
ERROR_TAIL = 4000
CHILD_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def time_limit() -> float:
    """``$JT_MLFLOW_TIMEOUT`` seconds (default 120)."""
    text = os.environ.get(LIMIT_ENV)
    try:
        value = float(text) if text else DEFAULT_LIMIT_S
    except ValueError:
        raise SpecError(
            f"{LIMIT_ENV}={text!r}: give the seconds a mirror to MLflow may take"
        ) from None
    if not value > 0:
        raise SpecError(f"{LIMIT_ENV}={text!r}: give a number of seconds above 0")
    return value


def result(uri: str, error: str | None = None, **fields: Any) -> dict[str, Any]:
    """A mirror's record: synced without ``error``, failed with it."""
    return {
        "uri": uri,
        "status": "failed" if error else "synced",
        "error": error,
        "mlflow_run_id": fields.pop("mlflow_run_id", None),
        "at": time.time(),
        **fields,
    }


def save(store: Store, run_id: str, record: dict[str, Any]) -> bool:
    """Put ``record`` in the run's state as ``mlflow``, if the run has ended (a live run's
    state is its supervisor's to write). Whether it was written."""
    state = read_json(store.paths(run_id).state)
    if state.get("status") not in TERMINAL:
        return False
    state["mlflow"] = record
    store.write_state(run_id, state)
    return True


def sync(
    run_id: str,
    uri: str | None = None,
    *,
    store: Store | None = None,
    experiment: str | None = None,
    record: bool = True,
) -> dict[str, Any]:
    """Mirror run ``run_id`` to ``uri`` (default: the run's ``--mlflow``, else
    ``$MLFLOW_TRACKING_URI``) in a child process; its record, also kept in the run's state
    when ``record`` and the run has ended. A missing run, no URI or no MLflow raises;
    a failing server is a ``failed`` record."""
    store = store or Store()
    spec = store.read_spec(run_id)  # RunNotFound names the fix
    uri = uri or spec.mlflow or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise SpecError(
            f"run {run_id} has no MLflow tracking URI: give one with --uri URI "
            "(http://host:5000, sqlite:///mlflow.db), set MLFLOW_TRACKING_URI, or "
            "submit runs with --mlflow URI"
        )
    return _in_child(store, run_id, uri, experiment=experiment, record=record)


def sync_model(store: Store, run_id: str, name: str, version: int) -> dict[str, Any]:
    """Register version ``version`` of model ``name`` (from run ``run_id``, which has
    ``--mlflow``) in MLflow now, with the run's MLflow run. Never raises: its record says
    whether it worked."""
    uri = ""
    try:
        uri = store.read_spec(run_id).mlflow or ""
        return _in_child(store, run_id, uri, model=f"{name}@{version}", record=False)
    except Exception as exc:
        return result(
            uri, str(exc) if isinstance(exc, TrainerError) else f"{type(exc).__name__}: {exc}"
        )


def _in_child(
    store: Store,
    run_id: str,
    uri: str,
    *,
    experiment: str | None = None,
    model: str | None = None,
    record: bool,
) -> dict[str, Any]:
    if importlib.util.find_spec("mlflow") is None:
        missing = MissingExtra(f"MLflow is not installed here (no module 'mlflow'): {EXTRA}")
        if record:
            save(store, run_id, result(uri, str(missing)))
        raise missing
    limit = time_limit()
    argv = [
        sys.executable,
        "-m",
        "jupyter_trainer.mirrors.mlflow",
        "worker",
        run_id,
        "--uri",
        uri,
        "--timeout",
        str(limit),
    ]
    argv += ["--experiment", experiment] if experiment else []
    argv += ["--model", model] if model else []
    argv += ["--record"] if record else []
    env = {**CHILD_ENV, **os.environ, HOME_ENV: str(store.home)}
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=limit + GRACE_S,
        )
    except subprocess.TimeoutExpired:
        found = result(
            uri,
            f"the mirror to MLflow did not end within {limit + GRACE_S:g} s "
            f"and was killed ({LIMIT_ENV} sets its limit)",
        )
    else:
        lines = done.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1])  # the child recorded it where asked
        except (IndexError, ValueError):
            found = result(
                uri,
                f"the mirror to MLflow exited with code {done.returncode}: "
                f"{done.stderr[-ERROR_TAIL:]}",
            )
    if record:
        save(store, run_id, found)
    return found


# -- the child -------------------------------------------------------------------------------


class _Once:
    """The child's one result: from its work, or from its alarm when time is up."""

    def __init__(self, store: Store, run_id: str, record: bool) -> None:
        self.store, self.run_id, self.record = store, run_id, record
        self.lock = threading.Lock()
        self.done = False

    def finish(self, found: dict[str, Any]) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            if self.record:
                try:
                    save(self.store, self.run_id, found)
                except Exception as exc:  # say so; the result still goes out
                    print(
                        f"cannot record the mirror in run {self.run_id}'s state: {exc!r}",
                        file=sys.stderr,
                    )
            print(json.dumps(found), flush=True)


@contextlib.contextmanager
def local_store_lock(uri: str) -> Iterator[None]:
    """One mirror at a time on a local SQLite store (``sqlite:////path``): MLflow creates
    and migrates a new store's tables on first use, and two processes doing that at once
    (a run's mirror and a model registered from it) break each other's migration."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = uri[len("sqlite:///") :]
    with open(f"{path}.jt-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def worker(argv: list[str]) -> int:
    """``worker RUN --uri URI [--timeout S] [--experiment E] [--model NAME@V] [--record]``:
    mirror the run, print the record as one JSON line, exit 0 if synced."""
    parser = argparse.ArgumentParser(prog="python -m jupyter_trainer.mirrors.mlflow worker")
    parser.add_argument("run")
    parser.add_argument("--uri", required=True)
    parser.add_argument("--timeout", type=float, default=DEFAULT_LIMIT_S)
    parser.add_argument("--experiment")
    parser.add_argument("--model", help="only this version of a model: NAME@VERSION")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    store = Store()
    once = _Once(store, args.run, args.record)
    start = time.monotonic()

    def alarm() -> None:
        once.finish(
            result(
                args.uri,
                f"the mirror to MLflow did not end within "
                f"{args.timeout:g} s ({LIMIT_ENV} sets this limit)",
            )
        )
        os._exit(1)

    timer = threading.Timer(args.timeout, alarm)
    timer.daemon = True
    timer.start()
    try:
        from .mirror import Mirror

        name, _, version = (args.model or "").rpartition("@")
        previous = store.read_state(args.run).get("mlflow") or {}
        known = previous.get("mlflow_run_id") if previous.get("uri") == args.uri else None
        with local_store_lock(args.uri):
            mirror = Mirror(store, args.run, args.uri, args.experiment)
            written = mirror.run(known, model=(name, int(version)) if args.model else None)
        found = result(args.uri, seconds=round(time.monotonic() - start, 3), **written)
    except Exception as exc:
        traceback.print_exc()
        message = str(exc) if isinstance(exc, MissingExtra) else f"{type(exc).__name__}: {exc}"
        found = result(args.uri, message[-ERROR_TAIL:])
    once.finish(found)
    return 0 if found["status"] == "synced" else 1


def main(argv: list[str] | None = None) -> int:
    """``sync RUN`` (what the supervisor runs once a run has ended) or ``worker ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker(argv[1:])
    if len(argv) != 2 or argv[0] != "sync":
        print("usage: python -m jupyter_trainer.mirrors.mlflow sync RUN", file=sys.stderr)
        return 2
    try:
        found = sync(argv[1])
    except Exception as exc:  # in the supervisor's log
        print(f"mirroring run {argv[1]} to MLflow failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"MLflow ({found['uri']}): {found['status']}"
        + (f", run {found['mlflow_run_id']}" if found.get("mlflow_run_id") else "")
        + (f": {found['error']}" if found.get("error") else ""),
        flush=True,
    )
    return 0 if found["status"] == "synced" else 1
