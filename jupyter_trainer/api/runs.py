"""The public Python API: ``submit``, ``rerun``, ``resume``, ``diff``, ``get_run``, ``runs`` and
the ``Run`` handle. What a submission is checked and captured into before it starts is
submission.py's.

Every front end (magics, CLI, widget, server) goes through these functions. A ``Run`` is
only a reader of the run store: it never owns the run's processes, so any number of them,
in any process, can follow or cancel the same run.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import environment
from ..core import hooks
from ..core.errors import RecordDamaged, RunCanceled, RunFailed
from ..core.records import StateRecord
from ..core.spec import DEFAULT_STALL_TIMEOUT, DEFAULT_SYSTEM_INTERVAL, RunSpec, validate_run_id
from ..core.waker import Waker
from ..rankside.host import procs
from ..store import ACTIVE, TERMINAL, Store
from ..store.listing import list_runs
from ..store.owners import Identity
from .run_readers import RunReaders
from .start import start_again, start_run
from .submission import given_params, run_writer

if TYPE_CHECKING:
    from ..store.doctor import Report
    from ..store.outputs import RunFile
    from .diff import RunDiff
    from .dry_run import DryRun
    from .models import Model


def submit(
    code: str | None = None,
    *,
    script: str | os.PathLike | None = None,
    args: Sequence[str] = (),
    name: str | None = None,
    target: str = "local",
    nodes: int = 1,
    procs: int = 1,
    launcher: str = "torchrun",
    backend: str | None = None,
    env: str | None = None,
    params: Mapping[str, Any] | Sequence[str] | None = None,
    source: str | os.PathLike | None = None,
    max_restarts: int = 0,
    hot: bool | None = None,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    on_stall: str = "warn",
    stop_on_nan: str | Sequence[str] = (),
    system_interval: float = DEFAULT_SYSTEM_INTERVAL,
    autolog: bool = True,
    debug: bool | float = False,
    data: Mapping[str, str | os.PathLike] | Sequence[str] | None = None,
    mlflow: str | None = None,
    storage: str | None = None,
    namespace: Mapping[str, Any] | None = None,
    history: Sequence[str] = (),
    wait: bool = False,
    home: str | os.PathLike | None = None,
    origin: Mapping[str, Any] | None = None,
    dry_run: bool = False,
) -> Run | DryRun:
    """Snapshot ``code`` (a cell's source) or ``script`` and start it as a run.

    ``namespace`` is where the code's free names are looked up (the notebook's variables,
    helpers and imports); ``params`` are ``KEY=VALUE`` strings or a mapping that override
    them. ``data`` maps input names to folders, files or URLs (or is ``NAME=PATH`` strings):
    the code finds each at ``jt.data[NAME]`` on its node; a URL is downloaded now, within
    ``$JUPYTER_TRAINER_MAX_DOWNLOAD_BYTES`` and ``$JUPYTER_TRAINER_DOWNLOAD_TIMEOUT``, and
    recorded with its credentials redacted (docs/data.md). ``mlflow`` is a tracking URI the
    run is mirrored to (default: ``$MLFLOW_TRACKING_URI``). ``storage`` is a URL
    (``s3://bucket/prefix``, any fsspec URL; default: the target's or the workspace's) that
    the run's checkpoints and outputs are uploaded to (docs/checkpoints.md). ``hot`` forks the ranks from a
    warm pool that has imported torch, falling back to torchrun; by default (``None``) a
    torchrun run without restarts on the local target (one node), an ssh target or a Slurm
    target with ``hold`` is hot
    unless ``$JT_HOT`` is ``0``, and ``hot=False`` always starts torchrun (see
    docs/hot-start.md). Everything is validated and
    captured before the run is created; on any error nothing is written and nothing starts.
    With ``dry_run`` nothing is created or started either way: the returned ``DryRun`` says
    what would be run (its ``text`` is what ``--dry-run`` prints; see dry_run.py).
    ``system_interval`` is how often each rank samples its CPU, memory and GPU figures
    (``Run.system``; 0: never). With ``autolog`` (the default) the frameworks the code
    imports report to the run by themselves (transformers' ``Trainer``, Accelerate,
    Lightning, TensorBoard's ``SummaryWriter``; see docs/frameworks.md), and their
    checkpoints are kept in the run and resumed from; ``autolog=False`` leaves them alone.
    With ``debug`` (True, or a time limit in seconds) a rank that raises waits in a debugger
    to be attached (``Run.debug``; docs/debug.md) instead of exiting.
    """
    notes: list[str] = []  # what a dry run could not do (download a URL input)
    store, tgt, write = run_writer(
        code,
        script=script,
        args=args,
        name=name,
        target=target,
        nodes=nodes,
        procs=procs,
        launcher=launcher,
        backend=backend,
        env=env,
        params=given_params(params),
        source=source,
        max_restarts=max_restarts,
        stall_timeout=stall_timeout,
        system_interval=system_interval,
        autolog=autolog,
        debug=debug,
        on_stall=on_stall,
        stop_on_nan=stop_on_nan,
        data=data,
        mlflow=mlflow,
        storage=storage,
        namespace=namespace,
        history=history,
        home=home,
        origin=origin,
        hot=hot,
        dry_run=dry_run,
        notes=notes,
    )
    if dry_run:
        from .dry_run import dry_run as show_run  # lazy: only --dry-run needs it

        return show_run(store, tgt, write, notes)
    run = Run(start_run(store, tgt, write), store)
    return run.wait() if wait else run


def rerun(
    run_id: str,
    params: Mapping[str, Any] | Sequence[str] | None = None,
    target: str | None = None,
    wait: bool = False,
    home: str | os.PathLike | None = None,
) -> Run:
    """Start a new run of run ``run_id``: its exact code snapshot, environment (the same
    lock), params and launch. ``params`` (a mapping or ``KEY=VALUE`` strings) change some of
    its params, ``target`` where it goes. The new run's spec records ``lineage``
    ``{"rerun_of": run_id}``. A bad id, a missing run or an unknown param starts nothing."""
    store = Store(home)
    run = Run(start_again(store, run_id, params=given_params(params), target=target), store)
    return run.wait() if wait else run


def resume(
    run_id: str,
    params: Mapping[str, Any] | Sequence[str] | None = None,
    target: str | None = None,
    wait: bool = False,
    home: str | os.PathLike | None = None,
) -> Run:
    """``rerun``, starting from run ``run_id``'s latest complete checkpoint: it is copied into
    the new run's ``checkpoints/`` (where ``jt.load_checkpoint()`` finds it) before the run
    starts. A run without a checkpoint raises ``RunStateError`` and starts nothing."""
    store = Store(home)
    run = Run(
        start_again(store, run_id, params=given_params(params), target=target, resume=True), store
    )
    return run.wait() if wait else run


def diff(a: str, b: str, *, home: str | os.PathLike | None = None) -> RunDiff:
    """What differs between runs ``a`` and ``b``: params, launch and target, environment
    packages, code and metrics. Reads the two run records; changes nothing."""
    from .diff import compare_runs

    return compare_runs(Store(home), a, b)


def get_run(run_id: str, *, home: str | os.PathLike | None = None) -> Run:
    """The run ``run_id`` from the store; raises ``RunNotFound`` if there is none. A run
    whose record is damaged is found all the same (it can still be canceled): reading its
    spec or state raises ``RecordDamaged``, which names the file and the fix."""
    store = Store(home)
    try:
        store.existing(validate_run_id(run_id))
    except RecordDamaged:
        pass
    return Run(run_id, store)


def runs(
    *,
    status: str | None = None,
    name: str | None = None,
    mine: bool = False,
    limit: int = 50,
    offset: int = 0,
    home: str | os.PathLike | None = None,
) -> list[Run]:
    """Runs in the store, newest first, optionally filtered by status or name substring;
    ``mine``: only this user's (in a shared workspace, everyone's are listed otherwise).

    ``limit`` is at least 1 and ``offset`` at least 0; anything else raises ``SpecError``.
    """
    store = Store(home)
    who = Identity.current() if mine else None
    return [
        Run(row["id"], store)
        for row in list_runs(store, status=status, name=name, owner=who, limit=limit, offset=offset)
    ]


def doctor(
    *, fix: bool = False, hashes: bool = True, home: str | os.PathLike | None = None
) -> Report:
    """Check the run store (index, states, lost runs, snapshots; see ``doctor``) and, with
    ``fix``, repair what can be repaired. Without ``fix`` nothing changes."""
    from ..store import doctor as checks

    return checks.examine(Store(home), fix=fix, hashes=hashes)


def prune_environments(
    *, dry_run: bool = False, home: str | os.PathLike | None = None
) -> list[dict[str, Any]]:
    """Remove the built environments that neither a name's latest version nor an unfinished
    run uses (see ``environment.prune``); with ``dry_run``, only say which."""
    store = Store(home)
    keep: dict[str, str] = {}
    for row in store.list_runs(limit=1 << 30):
        if row["status"] not in ACTIVE:
            continue
        state_env = store.read_state(row["id"]).get("environment") or {}
        for env_id in (
            state_env.get("env_id"),
            store.read_spec(row["id"]).env.prepared.get("env_id"),
        ):
            if env_id:
                keep.setdefault(env_id, f"used by run {row['id']} ({row['status']})")
    return environment.prune(keep=keep, dry_run=dry_run, home=store.home)


class Run(RunReaders):
    """A handle on one run in the store. Cheap; reads the store on every access."""

    def __init__(self, run_id: str, store: Store | None = None) -> None:
        self.id = validate_run_id(run_id)
        self.store = store or Store()
        self._spec: RunSpec | None = None

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Run) and other.id == self.id and other.store.home == self.store.home
        )

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def spec(self) -> RunSpec:
        if self._spec is None:
            self._spec = self.store.read_spec(self.id)
        return self._spec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> StateRecord:
        return self.store.read_state(self.id)

    @property
    def status(self) -> str:
        return self.state["status"]

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def path(self) -> Path:
        return self.store.paths(self.id).root

    @property
    def outputs(self) -> Path:
        return self.store.paths(self.id).outputs

    @property
    def tags(self) -> dict[str, str]:
        """The tags the run's code set with ``jt.tag`` (the latest value of each key)."""
        return self.store.run_tags(self.id)

    def files(self) -> list[RunFile]:
        """Every file of the run's ``outputs/``: its path relative to ``outputs/`` and its
        size, sorted by path; from the run's storage when this machine has none of them."""
        from ..store.outputs import RunFile, list_files

        found = list_files(self.store.existing(self.id).outputs)
        storage = None if found else self._storage()
        if storage is None:
            return found
        from ..store.object_storage import for_run  # none here: the run's storage has them

        remote = for_run(storage, self.store.home, self.id).outputs(self.id)
        return [RunFile(path, size) for path, size in remote.items()]

    def download(self, pattern: str, dest: str | os.PathLike) -> list[Path]:
        """Copy the files of ``outputs/`` that ``pattern`` names (a path relative to
        ``outputs/``, a folder, or a glob: ``*.pt``, ``checkpoints/**/*.pt``) into the folder
        ``dest``, each at its path under ``outputs/``. Returns the paths written; a pattern
        that matches nothing raises ``SpecError`` naming the files there are."""
        from ..store.outputs import copy_out, destination, list_files, match

        folder = destination(dest)
        root = self.store.existing(self.id).outputs
        storage = None if list_files(root) else self._storage()
        if storage is not None:  # none here: from the run's storage
            from ..store.object_storage import for_run

            remote = for_run(storage, self.store.home, self.id)
            return remote.fetch_outputs(self.id, pattern, folder)
        return copy_out(root, match(root, pattern), folder)

    def _storage(self) -> str | None:
        """The run's storage URL; None when it has none, or when its spec is damaged (the
        outputs here need no spec, and ``doctor`` names the damage)."""
        try:
            return self.spec.storage
        except RecordDamaged:
            return None

    def register_model(
        self, name: str, path: str, tags: Mapping[str, Any] | Sequence[str] | None = None
    ) -> Model:
        """Copy ``path`` (a file or folder of ``outputs/``) into the model registry as the
        next version of ``name``, with this run's lineage; return that version."""
        from .models import register_model

        return register_model(self.store, self.id, name, path, tags)

    def wait(
        self, timeout: float | None = None, *, raise_on_failure: bool = True, poll: float = 0.5
    ) -> Run:
        """Block until the run ends. Raises ``RunFailed``/``RunCanceled`` unless told not to.

        Polls the state file quickly at first and backs off to every ``poll`` seconds, so
        short runs return promptly and long ones cost nothing. A run mirrored to MLflow
        (``--mlflow``) is waited for until its supervisor has recorded the mirror too
        (``state["mlflow"]``), within ``timeout``.
        """
        start = time.monotonic()
        with Waker() as waker:
            # The supervisor replaces state.json at each change: inotify on the run's folder
            # wakes this loop at once. Without it (or where it sees no other host's writes)
            # the loop polls: often early on (every 40 ms at 10 s, so a short run's end is
            # seen within a few hundredths of a second), then every ``poll`` seconds.
            waker.watch(self.store.paths(self.id).root)
            while True:
                # None: the state is damaged, and the supervisor that writes it again runs
                state = self.store.current_state(self.id) or {"status": "unknown"}
                if state["status"] in TERMINAL and not self._mirroring(state):
                    break
                waited = time.monotonic() - start
                if timeout is not None and waited > timeout:
                    if state["status"] in TERMINAL:
                        break  # the run ended; its mirror is still going
                    raise TimeoutError(
                        f"run {self.id} is still {state['status']} after {timeout} s"
                    )
                left = poll if timeout is None else max(0.01, min(poll, timeout - waited))
                waker.wait(left, min(poll, 0.02 + waited / 500))
        if raise_on_failure:
            self.raise_for_status(state)
        return self

    def _mirroring(self, state: Mapping[str, Any]) -> bool:
        """Whether the ended run's supervisor is still mirroring it to MLflow."""
        if not self.spec.mlflow or "mlflow" in state:
            return False
        supervisor = state.get("supervisor") or {}
        return supervisor.get("host") == socket.gethostname() and procs.is_alive(
            supervisor.get("pid"), supervisor.get("start_ticks")
        )

    def raise_for_status(self, state: Mapping[str, Any] | None = None) -> None:
        state = state or self.state
        status = state["status"]
        if status == "canceled":
            raise RunCanceled(
                f"run {self.id} was canceled: {state.get('reason', '')}".rstrip(": "),
                run_id=self.id,
                status=status,
            )
        if status in ("failed", "lost"):
            rank = state.get("failed_rank")
            where = f" (rank {rank} failed first)" if rank is not None else ""
            raise RunFailed(
                f"run {self.id} {status}{where}: {state.get('error', 'unknown error')}",
                run_id=self.id,
                status=status,
                failed_rank=rank,
                traceback=state.get("traceback"),
            )

    def cancel(
        self, *, wait: bool = True, timeout: float = 30.0, reason: str = "canceled by user"
    ) -> str:
        """Ask the supervisor to stop every process of the run; by default wait until it has.
        ``reason`` is what the run's state records (and ``show`` prints) as why it ended.
        Returns the run's status then.

        A run that ended raises ``RunStateError``. A run whose state is damaged is canceled
        all the same while its supervisor or its processes can be found (see
        ``Store.cancel``); with its supervisor gone, its processes are ended here and the
        status is ``lost``. A supervisor that has not ended the run within ``timeout``
        leaves it active: the request stays, and it acts on it when it next looks."""
        status = self.store.cancel(self.id, reason=reason)
        if status != "lost" and wait:
            try:
                self.wait(timeout, raise_on_failure=False)
            except TimeoutError:  # its supervisor has not acted yet: the status says so
                pass
            status = (self.store.current_state(self.id) or {"status": status})["status"]
        return status

    def preempt(self, grace: float = 30.0, *, wait: bool = True) -> dict[str, Any] | None:
        """Preempt the run as a scheduler would: every rank is told (``jt.preempted()``),
        gets ``grace`` seconds to checkpoint and return, and what is left is ended; the
        attempt ends as ``preempted`` and the next one resumes from the newest complete
        checkpoint. With ``wait``, returns the attempt's record once it has ended."""
        from .preemption import preempt

        return preempt(self.store, self.id, grace, wait)

    def rerun(
        self,
        params: Mapping[str, Any] | Sequence[str] | None = None,
        target: str | None = None,
        wait: bool = False,
    ) -> Run:
        """A new run of this run's snapshot, environment, params and launch (see ``rerun``)."""
        return rerun(self.id, params, target, wait, home=self.store.home)

    def resume(
        self,
        params: Mapping[str, Any] | Sequence[str] | None = None,
        target: str | None = None,
        wait: bool = False,
    ) -> Run:
        """A new run from this run's latest checkpoint (see ``resume``)."""
        return resume(self.id, params, target, wait, home=self.store.home)

    def monitor(self, **kwargs: Any):
        """This run's monitor, live or finished, with its whole history.

        In a notebook front end: the ``RunMonitor`` widget (it shows itself as a cell's
        value; ``display()`` it otherwise), kept current by a background thread, so this
        returns at once. Under papermill, in a terminal or with
        ``JUPYTER_TRAINER_MONITOR=text``: the text monitor, followed to the run's end.
        """
        return hooks.monitor("run", self, **kwargs)

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE
