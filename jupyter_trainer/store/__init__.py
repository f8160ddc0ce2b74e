"""The run store: run directories plus a SQLite index. The only code that knows the layout.

```
$JUPYTER_TRAINER_HOME            (default ~/.jupyter_trainer)
  runs.db                        SQLite index (WAL): one row per run, rebuilt from runs/
  runs.db.lock                   held shared while a run is created, exclusive to rebuild
  staging/                       snapshots being written (moved into a run atomically)
  runs/<run-id>/
    spec.json  state.json  cancel.request  supervisor.log  supervisor.alive  supervisor.pid
    .state-spare-*                 room for the state on a full disk (``reserve``)
    code/  events/rank-<r>.jsonl  logs/rank-<r>.log  ranks/rank-<r>.json  outputs/
    checkpoints/step-<N>.pt|.pkl   complete checkpoints (written under a "."-name, renamed)
  damaged/<run-id>/              a run whose spec was damaged, set aside by ``doctor --fix``
```
The supervisor of a run is the only writer of its ``state.json``; readers only read, and
write requests (``cancel.request``). A record that cannot be read raises ``RecordDamaged``
(``records``); ``liveness`` finds a run's supervisor, also without its state; ``ranks``
reads what the ranks wrote (records, events, logs); ``folders`` names and removes folders.
The run folders are the truth and the index a cache of them: a missing or corrupt index is
rebuilt from the folders when it is opened (a corrupt one is moved aside, never deleted),
and a run is created folder and row together or not at all. ``jupyter-trainer doctor --fix`` is the
one other writer of a state: it records a run whose supervisor is gone as ``lost``, and
rebuilds a damaged state (``repair``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import DiskFull, RecordDamaged, RunNotFound, RunStateError, StoreError
from ..core.modes import make_top, share_tree
from ..core.records import StateRecord
from ..core.secret_values import secret_values
from ..core.spec import RunSpec, validate_run_id
from ..core.top_folders import set_up_workspace
from ..rankside.host.home import HOME_ENV, default_home
from ..rankside.rank import rank_files, run_secrets
from . import listing, liveness, requests, reserve
from .folders import is_run_id, rmtree, slug
from .index import index_row, run_index, unwritable
from .liveness import HEARTBEAT_S
from .owners import Identity, check_may_act, verified_owner
from .ranks import RankReader, read_complete_lines
from .records import (
    ACTIVE,
    STATUSES,
    TERMINAL,
    RunPaths,
    json_text,
    load_spec,
    load_state,
    new_state,
    read_json,
    spec_record,
    write_json_atomic,
)
from .workspace import settings

__all__ = [  # what the layers above use of the store
    "ACTIVE",
    "HEARTBEAT_S",
    "HOME_ENV",
    "STATUSES",
    "TERMINAL",
    "RankReader",
    "RunPaths",
    "Store",
    "json_text",
    "latest_checkpoint",
    "liveness",
    "load_spec",
    "load_state",
    "new_state",
    "read_complete_lines",
    "read_json",
    "reserve",
    "spec_record",
    "write_json_atomic",
]

_log = logging.getLogger(__name__)


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint a resumed run starts from, in a run's ``checkpoints/``: the complete
    ``step-<N>.pt`` or ``.pkl`` of the highest step (``jt.save_checkpoint``), else the newest
    complete sharded one (``dcp/step-<N>/``, ``jt.checkpoint.save``), else the newest a
    framework saved there (a transformers ``checkpoint-N`` folder, a Lightning ``.ckpt``),
    else None. A file being written has a name starting with "." and is skipped."""
    from ..rankside.rank import dcp_checkpoint  # lazy: only a resume asks

    found = rank_files.checkpoints(str(folder))
    if found:
        return Path(found[-1][1])
    sharded = dcp_checkpoint.complete(str(folder / dcp_checkpoint.FOLDER))
    if sharded:
        return Path(sharded[-1][1])
    saved = rank_files.framework_checkpoints(str(folder))
    return Path(saved[-1][1]) if saved else None


class Store(RankReader):
    """A run store rooted at ``home`` (default ``$JUPYTER_TRAINER_HOME`` or ``~/.jupyter_trainer``)."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home).expanduser() if home else default_home()
        self.runs_dir = self.home / "runs"
        self.settings = settings(self.home)
        if self.settings.shared:
            set_up_workspace(self.home)
        self.index = run_index(self.home, self._folder_rows, self.settings)

    # -- layout ------------------------------------------------------------------------
    def paths(self, run_id: str) -> RunPaths:
        return RunPaths(self.runs_dir / validate_run_id(run_id))

    def existing(self, run_id: str) -> RunPaths:
        paths = self.paths(run_id)
        if not paths.spec.is_file():
            if paths.state.is_file():  # a run's folder, without its spec: damaged
                load_spec(paths, run_id)
            raise RunNotFound(
                f"no run {run_id!r} in {self.home}; list runs with `jupyter-trainer runs` "
                f"(or set {HOME_ENV} to the store that holds it)"
            )
        return paths

    def staging_dir(self) -> Path:
        """A fresh folder in which a snapshot can be written before the run exists."""
        base = self.home / "staging"
        try:
            make_top(self.home, self.settings.shared)
            make_top(base, self.settings.shared)
            return Path(tempfile.mkdtemp(dir=base)) / "code"
        except OSError as exc:
            raise unwritable(base, exc) from None

    def discard_staging(self, code_dir: Path) -> None:
        rmtree(code_dir.parent)

    def copy_snapshot(self, run_id: str, dest: Path) -> None:
        """Copy run ``run_id``'s code snapshot to ``dest`` (a ``staging_dir()`` not yet
        made), for a new run of the same code."""
        source = self.existing(run_id).code
        try:
            shutil.copytree(source, dest)
        except OSError as exc:
            raise StoreError(
                f"cannot copy the code snapshot of run {run_id} ({source}): {exc}"
            ) from None

    def seed_checkpoint(self, run_id: str, checkpoint: Path, source: Path) -> Path:
        """Copy ``checkpoint`` (a file or a folder in ``source``, another run's
        ``checkpoints/``) to the same place in the ``checkpoints/`` of run ``run_id``
        (which has not started), complete or not at all: under a "." name, then renamed."""
        folder = self.existing(run_id).checkpoints
        target = folder / Path(checkpoint).relative_to(source)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                if Path(checkpoint).is_dir():
                    shutil.copytree(checkpoint, tmp / "copy", symlinks=True)
                else:
                    shutil.copyfile(checkpoint, tmp / "copy")
                os.replace(tmp / "copy", target)
            finally:
                rmtree(tmp)
        except OSError as exc:
            raise StoreError(
                f"cannot copy the checkpoint {checkpoint} into run {run_id}: {exc}"
            ) from None
        return target

    def check_writable(self) -> None:
        """Raise ``StoreError`` now, before anything is written, if no run can be created."""
        for folder in (self.runs_dir, self.home / "staging"):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                raise unwritable(folder, exc) from None
        self.index.check_writable()

    # -- index -------------------------------------------------------------------------
    def folder_row(self, run_id: str) -> dict[str, Any] | None:
        """The index row a run's folder calls for (its recorded state), or None if its
        spec or state cannot be read."""
        try:
            paths = self.paths(run_id)
            state = read_json(paths.state)
            return index_row(
                run_id,
                RunSpec.from_dict(read_json(paths.spec)),
                {**state, "owner": verified_owner(state.get("owner"), paths.root)},
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _folder_rows(self) -> list[dict[str, Any]]:
        return [row for run_id in self.run_ids_on_disk() if (row := self.folder_row(run_id))]

    def run_ids_on_disk(self) -> list[str]:
        """Ids of the run folders (those with a spec, or a state whose spec is gone), sorted."""
        try:
            entries = list(os.scandir(self.runs_dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            e.name
            for e in entries
            if is_run_id(e.name)
            and any(os.path.isfile(Path(e.path, name)) for name in ("spec.json", "state.json"))
        )

    def index_rows(self) -> dict[str, dict[str, Any]]:
        """Every index row as stored (status as last recorded, liveness not applied)."""
        return self.index.rows()

    def reindex(self, run_id: str) -> bool:
        """Write the run's index row from its folder; False if the folder cannot be read."""
        row = self.folder_row(run_id)
        if row is not None:
            self.index.upsert(row)
        return row is not None

    def _index_upsert(self, run_id: str, spec: RunSpec, state: Mapping[str, Any]) -> None:
        self.index.upsert(index_row(run_id, spec, state))

    def list_runs(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        owner: Identity | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Runs, newest first. ``status`` filters on the effective status (``lost`` included);
        ``owner``: only the runs of that user (``Identity.current()``: "mine"). Read a page at
        a time (``listing.list_runs``): the first page of a large store looks at few folders."""
        return listing.list_runs(
            self, status=status, name=name, owner=owner, limit=limit, offset=offset
        )

    # -- runs --------------------------------------------------------------------------
    def new_run_id(self, name: str) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
        import secrets  # here: only a new run needs it, not a supervisor's start-up

        return f"{slug(name)}-{stamp}-{secrets.token_hex(3)}"

    def create(self, spec: RunSpec, snapshot: Path, owner: Identity | None = None) -> str:
        """Make the run directory from a written snapshot (moved, not copied); return its id.
        The run's state records its ``owner`` (this process's user unless given).

        The folder is renamed into place inside the transaction that inserts its index row,
        so a failure of either leaves neither.
        """
        run_id = self.new_run_id(spec.name)
        final = self.paths(run_id)
        try:
            try:
                make_top(self.home, self.settings.shared)
                make_top(self.runs_dir, self.settings.shared)
                tmp = RunPaths(Path(tempfile.mkdtemp(prefix=f".{run_id}.", dir=self.runs_dir)))
            except OSError as exc:
                raise unwritable(self.runs_dir, exc) from None
            try:
                os.replace(snapshot, tmp.code)
                for folder in (tmp.events, tmp.logs, tmp.ranks, tmp.outputs):
                    folder.mkdir()
                write_json_atomic(tmp.spec, spec_record(spec))
                os.chmod(tmp.spec, 0o444)
                state = new_state(run_id, time.time(), (owner or Identity.current()).record())
                write_json_atomic(tmp.state, state)
                if self.settings.shared:
                    share_tree(tmp.root)
                run_secrets.write(tmp.root, secret_values(spec))  # after share_tree: 0600
                self.index.publish(index_row(run_id, spec, state), tmp.root, final.root)
            except BaseException as exc:
                rmtree(tmp.root)
                if isinstance(exc, OSError):
                    raise unwritable(self.runs_dir, exc) from None
                raise
        finally:
            if snapshot.parent.parent == self.home / "staging":
                rmtree(snapshot.parent)
        return run_id

    def read_spec(self, run_id: str) -> RunSpec:
        """The run's spec; ``RecordDamaged`` names ``spec.json`` if it cannot be read."""
        return load_spec(self.existing(run_id), run_id)

    def read_state(self, run_id: str) -> StateRecord:
        """The run's state as written by its supervisor; a run whose supervisor is gone is
        ``lost``, ended when the supervisor was last seen (so its duration stops growing).
        ``RecordDamaged`` names ``state.json`` if it cannot be read. Its owner is the
        kernel's, and ``stale`` says when its supervisor does not answer (``as_read``)."""
        paths = self.existing(run_id)
        state = load_state(paths, run_id)
        if state["status"] in ACTIVE and liveness.supervisor_gone(state):
            state = load_state(paths, run_id)  # it may have written its last state and exited
            if state["status"] in ACTIVE:
                state = self._as_lost(paths, state)
        return liveness.as_read(paths, state)

    def current_state(self, run_id: str) -> StateRecord | None:
        """``read_state``, or None while the state is damaged but the run's supervisor runs
        (it writes the state again): for readers that follow a run and can wait."""
        try:
            return self.read_state(run_id)
        except RecordDamaged:
            if liveness.supervisor_running(self.paths(run_id)):
                return None
            raise

    def _as_lost(self, paths: RunPaths, state: StateRecord) -> StateRecord:
        ended = self.last_seen(paths, state)
        current = state.get("stages", {}).get(state["status"])
        if current is not None and "end" not in current:
            current["end"] = max(ended, current.get("start", ended))
        state["status"] = "lost"
        state["ended"] = state["supervisor_last_seen"] = ended
        if reserve.is_full(paths.root):  # the likely cause, stated as the fact it is
            state.setdefault(
                "error",
                f"the run's supervisor process is gone, and the run "
                f"store's disk is full ({paths.root}); free some space, then "
                "`jupyter-trainer doctor --fix` records the run as lost",
            )
        state.setdefault(
            "error",
            "the run's supervisor process is gone (killed or crashed); "
            "its launcher was sent SIGTERM when it died",
        )
        return state

    last_seen = staticmethod(liveness.last_seen)

    def record_lost(self, run_id: str) -> StateRecord | None:
        """Write ``lost`` into the state of a run whose supervisor is gone (with ``ended`` =
        when it was last seen); None if the run is not lost. ``doctor --fix`` only."""
        paths = self.existing(run_id)
        state = self.read_state(run_id)
        if state["status"] != "lost" or read_json(paths.state)["status"] == "lost":
            return None
        write_json_atomic(paths.state, state)
        self._index_upsert(run_id, self.read_spec(run_id), state)
        return state

    def write_state(self, run_id: str, state: StateRecord, spec: RunSpec | None = None) -> bool:
        """Replace the run's state atomically and update its index row. Supervisor only.

        ``state.json`` is the record; an index that cannot be written here does not stop
        the run: readers take an unfinished row's status from the state, and ``doctor``
        reports and fixes the row. On a full disk the state goes through the room the
        supervisor reserved (``reserve``): True when it did, ``DiskFull`` when even that
        could not take it.
        """
        state["updated"] = time.time()
        paths = self.paths(run_id)
        full = False
        try:
            write_json_atomic(paths.state, state)
        except OSError as exc:
            if not reserve.is_disk_full(exc):
                raise
            if not reserve.write_in_reserve(paths, json_text(state)):
                raise DiskFull(
                    reserve.disk_full_error(run_id, paths.state), path=str(paths.state)
                ) from None
            full = True
        try:
            self._index_upsert(run_id, spec or self.read_spec(run_id), state)
        except StoreError as exc:
            _log.warning("jupyter-trainer: run %s is %s, but %s", run_id, state["status"], exc)
        return full

    def cancel(
        self, run_id: str, reason: str = "canceled by user", actor: Identity | None = None
    ) -> str:
        """Ask the run's supervisor to stop every process of the run; returns the run's
        status. A run that ended refuses (``RunStateError``), and so does another user's
        (``NotOwner``), unless ``actor`` (this process's user) is in the admin group. A run
        whose state is damaged is still canceled: through its supervisor, found by its pid
        record, or, with the supervisor gone, by ending what is left of its processes (then
        ``lost``)."""
        paths = self.paths(run_id)
        try:
            state = self.read_state(run_id)
            self.check_owner(run_id, state, actor, "cancel", "the run goes on")
            status = state["status"]
        except RecordDamaged as damaged:
            self.check_owner(run_id, {}, actor, "cancel", "the run goes on")
            row = self.index.row(run_id) if self.index.exists() else None
            indexed = row["status"] if row else None
            return liveness.cancel_damaged(
                paths, damaged, indexed, reason, self._ask_elsewhere(run_id, reason)
            )
        if status in TERMINAL:
            raise RunStateError(f"run {run_id} already ended ({status}); nothing to cancel")
        liveness.write_cancel_request(paths, reason, self._ask_elsewhere(run_id, reason))
        return status

    def request_cancel(
        self, run_id: str, reason: str = "canceled by user", actor: Identity | None = None
    ) -> None:
        """Write the run's cancel request, whatever its state (``cancel`` checks it first);
        another user's run refuses, as for ``cancel``."""
        paths = self.existing(run_id)
        try:
            state: Mapping[str, Any] = read_json(paths.state)
        except (OSError, ValueError):
            state = {}
        self.check_owner(run_id, state, actor, "cancel", "the run goes on")
        liveness.write_cancel_request(paths, reason, self._ask_elsewhere(run_id, reason))

    def _ask_elsewhere(self, run_id: str, reason: str) -> Callable[[], object]:
        """How an admin, whom the run's folder refuses, leaves the cancel request instead."""
        return lambda: requests.write_cancel(self.home, "run", run_id, reason, self.settings.shared)

    def owner(self, run_id: str, state: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The run's owner record: its folder's owner, by the kernel (``verified_owner``;
        the state adds its Hub user only)."""
        return verified_owner((state or {}).get("owner"), self.paths(run_id).root)

    def _folder_of(self, row: Mapping[str, Any]) -> Path:
        return self.paths(str(row["id"])).root

    def check_owner(
        self,
        run_id: str,
        state: Mapping[str, Any],
        actor: Identity | None,
        verb: str,
        nothing: str,
    ) -> None:
        """``NotOwner`` unless ``actor`` (this process's user) may ``verb`` the run."""
        check_may_act(
            self.owner(run_id, state),
            actor or Identity.current(),
            self.settings.admin_group,
            f"{verb} run {run_id}",
            nothing,
        )

    def cancel_request(
        self, run_id: str, owner: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The cancel request, if any; an empty one (written on a full disk) has no reason.
        With the run's ``owner`` record, also an admin's request left in the workspace."""
        found = liveness.read_cancel_request(self.paths(run_id).cancel_request)
        if found is not None:
            return found
        return requests.read_cancel(self.home, "run", run_id, owner, self.settings.admin_group)

    def delete(self, run_id: str) -> None:
        paths = self.existing(run_id)
        self.index.delete(run_id)
        rmtree(paths.root)
