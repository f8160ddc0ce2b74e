"""Sweeps in the run store: the only code that knows a sweep folder's layout.

```
$JUPYTER_TRAINER_HOME/sweeps/<sweep-id>/
  spec.json        what was asked (sweep.spec.SweepSpec); written once
  template/        the run every trial starts from: spec.json and code/ (the snapshot)
  study.db         the Optuna study (SQLite storage): sampler and pruner history
  state.json       status, the trials (number, run id, params, status, objective), best
  driver.log       the sweep driver's output
  driver.alive     touched by a live driver
  cancel.request   written by anyone who cancels the sweep
```
The driver is the only writer of ``state.json`` while it lives; a reader that finds the
driver gone while the sweep is unfinished sees the status ``interrupted`` (``jupyter-trainer
sweep resume`` starts a driver again). The trials themselves are ordinary runs in ``runs/``
whose specs name the sweep and their trial number.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import StoreError, SweepNotFound, TrainerError
from ..core.modes import make_top, share_tree
from ..core.secret_values import secret_values, with_secret_values
from ..core.spec import RunSpec, validate_run_id
from ..rankside.host import procs
from ..rankside.host.home import HOME_ENV, default_home
from ..rankside.rank import run_secrets
from . import liveness, read_json, requests, write_json_atomic
from .folders import rmtree, slug
from .index import index_url, unwritable
from .owners import Identity, check_may_act, verified_owner
from .records import read_json_object
from .workspace import settings

if TYPE_CHECKING:
    from . import Store

SWEEP_ACTIVE = ("created", "running")
SWEEP_TERMINAL = ("completed", "canceled", "failed")
# A sweep still "created" this long after creation never got a driver.
DRIVER_GRACE_S = 60.0


@dataclass(frozen=True)
class SweepPaths:
    root: Path
    index: str | None = None  # the workspace's PostgreSQL URL: the study is kept there

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def template(self) -> Path:
        return self.root / "template"

    @property
    def template_spec(self) -> Path:
        return self.root / "template" / "spec.json"

    @property
    def template_code(self) -> Path:
        return self.root / "template" / "code"

    @property
    def study(self) -> Path:
        return self.root / "study.db"

    @property
    def log(self) -> Path:
        return self.root / "driver.log"

    @property
    def alive(self) -> Path:
        return self.root / "driver.alive"

    @property
    def cancel_request(self) -> Path:
        return self.root / "cancel.request"

    @property
    def storage_url(self) -> str:
        """The Optuna storage URL of the study (``optuna.load_study(storage=...)``): its
        SQLite file, or in a shared workspace the workspace's PostgreSQL database (the
        study is named after the sweep), since SQLite is not safe on a shared filesystem."""
        if self.index:
            return "postgresql+psycopg://" + self.index.split("://", 1)[1]
        return f"sqlite:///{self.study}"


class SweepStore:
    """The sweeps of the run store at ``home`` (default ``$JUPYTER_TRAINER_HOME``)."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home).expanduser() if home else default_home()
        self.dir = self.home / "sweeps"
        self.index = index_url(self.home)

    def paths(self, sweep_id: str) -> SweepPaths:
        return SweepPaths(self.dir / validate_run_id(sweep_id), self.index)

    def existing(self, sweep_id: str) -> SweepPaths:
        paths = self.paths(sweep_id)
        if not paths.spec.is_file():
            raise SweepNotFound(
                f"no sweep {sweep_id!r} in {self.home}; list sweeps with "
                f"`jupyter-trainer sweeps` (or set {HOME_ENV} to the store that "
                "holds it)"
            )
        return paths

    def ids(self) -> list[str]:
        """Every sweep's id, newest first."""
        try:
            found = [p for p in self.dir.iterdir() if (p / "spec.json").is_file()]
        except FileNotFoundError:
            return []
        return [
            p.name
            for p in sorted(found, key=lambda p: (p / "spec.json").stat().st_mtime, reverse=True)
            if not p.name.startswith(".")
        ]

    def create(self, name: str, spec: dict[str, Any], template: RunSpec, snapshot: Path) -> str:
        """Make a sweep folder from its spec and a template run written to ``snapshot`` (a
        staging folder, moved); return the new sweep's id."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
        import secrets

        base = slug(name)
        base = base if "sweep" in base else f"{base}-sweep"
        sweep_id = f"{base}-{stamp}-{secrets.token_hex(3)}"
        final = self.paths(sweep_id)
        try:
            shared = settings(self.home).shared
            make_top(self.home, shared)
            make_top(self.dir, shared)
            tmp = SweepPaths(Path(tempfile.mkdtemp(prefix=f".{sweep_id}.", dir=self.dir)))
        except OSError as exc:
            raise unwritable(self.dir, exc) from None
        try:
            tmp.template.mkdir()
            os.replace(snapshot, tmp.template_code)
            write_json_atomic(tmp.template_spec, template.to_dict())
            write_json_atomic(tmp.spec, spec)
            write_json_atomic(
                tmp.state,
                {
                    "id": sweep_id,
                    "status": "created",
                    "created": time.time(),
                    "owner": Identity.current().record(),
                    "trials": [],
                    "counts": {},
                },
            )
            if shared:
                share_tree(tmp.root)
            run_secrets.write(tmp.template, secret_values(template))  # after share_tree: 0600
            os.replace(tmp.root, final.root)
        except BaseException as exc:
            rmtree(tmp.root)
            if isinstance(exc, OSError):
                raise unwritable(self.dir, exc) from None
            raise
        finally:
            if snapshot.parent.parent == self.home / "staging":
                rmtree(snapshot.parent)
        return sweep_id

    def read_spec(self, sweep_id: str) -> dict[str, Any]:
        return read_json_object(self.existing(sweep_id).spec)

    def read_template(self, sweep_id: str) -> RunSpec:
        """The template every trial starts from, with its secret values where this user may
        read them (the sweep's owner, whose driver starts the trials)."""
        paths = self.existing(sweep_id)
        template = RunSpec.from_dict(read_json(paths.template_spec))
        return with_secret_values(template, run_secrets.read(paths.template))

    def read_state(self, sweep_id: str) -> dict[str, Any]:
        """The sweep's state as its driver last wrote it, ``interrupted`` if the driver is
        gone before the sweep ended."""
        state = read_json_object(self.existing(sweep_id).state)
        if state["status"] in SWEEP_ACTIVE and self.driver_gone(state):
            state = {**state, "status": "interrupted", "recorded_status": state["status"]}
        return state

    def write_state(self, sweep_id: str, state: dict[str, Any]) -> None:
        write_json_atomic(self.paths(sweep_id).state, state)

    def driver_gone(self, state: dict[str, Any]) -> bool:
        driver = state.get("driver")
        if not driver:
            return time.time() - float(state.get("created", 0)) > DRIVER_GRACE_S
        if driver.get("host") != socket.gethostname():
            return False
        return not procs.is_alive(driver.get("pid"), driver.get("start_ticks"))

    def owner(self, sweep_id: str) -> dict[str, Any] | None:
        """The sweep's owner: its folder's, by the kernel (``owners.verified_owner``); its
        state's record adds only its Hub user, as a run's does."""
        paths = self.paths(sweep_id)
        try:
            found = read_json_object(paths.state).get("owner")
        except (OSError, ValueError):
            found = None
        return verified_owner(found, paths.root)

    def request_cancel(
        self, sweep_id: str, reason: str = "canceled by user", actor: Identity | None = None
    ) -> None:
        """Ask the sweep's driver to cancel it; another user's sweep refuses (``NotOwner``)
        unless ``actor`` (this process's user) is in the workspace's admin group."""
        paths = self.existing(sweep_id)
        found = settings(self.home)
        check_may_act(
            self.owner(sweep_id),
            actor or Identity.current(),
            found.admin_group,
            f"cancel sweep {sweep_id}",
            "the sweep goes on",
        )
        liveness.write_cancel_request(
            paths,
            reason,
            lambda: requests.write_cancel(self.home, "sweep", sweep_id, reason, found.shared),
            what=f"sweep {sweep_id}",
        )

    def cancel_request(
        self,
        sweep_id: str,
        owner: dict[str, Any] | None = None,
        admin_group: str | None = None,
        since: float = 0.0,
    ) -> dict[str, Any] | None:
        """The sweep's cancel request, if any; with its ``owner`` record and the workspace's
        ``admin_group``, also an admin's request left in the workspace at or after ``since``."""
        found = liveness.read_cancel_request(self.paths(sweep_id).cancel_request)
        if found is not None:
            return found
        return requests.read_cancel(self.home, "sweep", sweep_id, owner, admin_group, since)

    def clear_cancel(self, sweep_id: str) -> None:
        self.paths(sweep_id).cancel_request.unlink(missing_ok=True)

    def copy_template(self, sweep_id: str, dest: Path) -> None:
        """Copy the template's snapshot to ``dest`` (a ``Store.staging_dir()`` not yet made)."""
        source = self.existing(sweep_id).template_code
        try:
            shutil.copytree(source, dest)
        except OSError as exc:
            raise StoreError(
                f"cannot copy the code snapshot of sweep {sweep_id} ({source}): {exc}"
            ) from None


def trial_runs(store: Store, rows: Iterable[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """{run id: (sweep id, trial number)} of the ``rows`` that are trials.

    The sweeps' states name their trials' runs. A trial's run exists a moment before its
    driver writes its id down, so the specs of the runs made since the oldest unfinished
    sweep began are read as well (only those: reading every spec would cost a file per run).
    """
    sweeps = SweepStore(store.home)
    found: dict[str, tuple[str, int]] = {}
    since: float | None = None
    for sweep_id in sweeps.ids():
        try:
            state = sweeps.read_state(sweep_id)
        except (TrainerError, OSError, ValueError):
            continue
        for trial in state.get("trials") or []:
            if trial.get("run"):
                found[trial["run"]] = (sweep_id, trial["number"])
        if state.get("status") not in SWEEP_TERMINAL:
            created = state.get("created") or 0.0
            since = created if since is None else min(since, created)
    if since is not None:
        for row in rows:
            if row["id"] in found or row["created"] < since:
                continue
            try:
                spec = store.read_spec(row["id"])
            except (TrainerError, OSError, ValueError):
                continue
            if spec.sweep is not None and spec.trial is not None:
                found[row["id"]] = (spec.sweep, spec.trial)
    return found
