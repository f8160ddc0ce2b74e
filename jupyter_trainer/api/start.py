"""Start a run: the one path from a snapshot in staging to a detached supervisor.

``submit`` takes it with a snapshot it has just written; ``start_again`` (rerun and resume)
takes it with a copy of a stored run's snapshot, the same environment lock, the same params
(some overridden), launch and data inputs (hashed again: the new run records them as they
are now), and records where the new run came from in its ``lineage``.
Everything is checked before the run exists (the target, the environment's build and its
pre-flight import check, the copied snapshot's hash); on any error nothing is left in the
store and nothing starts.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import environment
from ..core.errors import RunStateError, SpecError, StoreError
from ..core.secret_values import missing_secrets, with_secret_values
from ..core.spec import RunSpec, TargetSpec, validate_run_id
from ..inputs.inputs import refresh_inputs
from ..rankside.rank import run_secrets
from ..store import Store, latest_checkpoint
from ..supervisor import starter
from ..targets import Target, get_target


def write_checked(
    write: Callable[[Path], RunSpec], staging: Path, target: Target, home: Path
) -> RunSpec:
    """Write the snapshot into ``staging``, let ``target`` check it, then build the
    environment if it is not cached and check the snapshot's imports with its interpreter,
    before anything exists: a missing module starts nothing."""
    spec = write(staging)
    target.check(spec)
    env = environment.prepare(
        spec.env,
        staging,
        spec.code.entry,
        target=target,
        launcher=spec.launch.launcher,
        home=home,
    )
    return replace(spec, env=env)


def submitter() -> dict[str, str]:
    """Who starts a run, for its ``origin``."""
    return {"user": getpass.getuser(), "host": socket.gethostname()}


def start_run(
    store: Store,
    target: Target,
    write: Callable[[Path], RunSpec],
    seed: Callable[[str], Any] | None = None,
) -> str:
    """Create the run whose snapshot and spec ``write(staging)`` makes, start its
    supervisor and return the run's id.

    The supervisor's interpreter (one kept waiting since the last run, or one started now)
    imports what it needs while ``write`` runs; it is handed the run id once the run
    exists. ``seed(run_id)`` fills the new run's folder before its supervisor starts (a
    resumed run's checkpoint); if it fails, the run is removed again.
    """
    supervisor = starter.take(str(store.home), target.name)
    staging = run_id = None
    try:
        store.check_writable()  # an unwritable store fails here, before any snapshot is written
        staging = store.staging_dir()
        spec = write_checked(write, staging, target, store.home)
        run_id = store.create(spec, staging)
        if seed is not None:
            seed(run_id)
    except BaseException:
        starter.give_back(supervisor)
        if run_id is not None:
            store.delete(run_id)
        elif staging is not None:
            store.discard_staging(staging)
        raise
    supervisor.start(run_id)
    starter.keep_spare(str(store.home), target.name)
    return run_id


def one_start_per_process() -> None:
    """This process (a command line) starts one run or sweep and ends: no supervisor is
    kept waiting for a next run."""
    starter.no_spare()


def start_again(
    store: Store,
    run_id: str,
    *,
    params: Mapping[str, Any] | None = None,
    target: str | None = None,
    resume: bool = False,
) -> str:
    """Start a new run of run ``run_id``'s code, environment, params and launch; return its
    id. ``params`` override some of the run's params (only those it has: they are the names
    its code reads); ``target`` sends it elsewhere. With ``resume`` the run's latest
    complete checkpoint is copied into the new run's ``checkpoints/`` first."""
    old_id = validate_run_id(run_id)
    old = store.read_spec(old_id)
    overrides = dict(params or {})
    unknown = sorted(set(overrides) - set(old.params))
    if unknown:
        known = ", ".join(sorted(old.params)) or "none"
        raise SpecError(
            f"run {old_id} has no parameter {', '.join(map(repr, unknown))}; its "
            f"parameters are: {known} (the same code runs again, and it reads "
            "only those)"
        )
    old = with_kept_secrets(store, old_id, old, overrides)
    lineage: dict[str, Any] = {"rerun_of": old_id}
    checkpoint = None
    seed: Callable[[str], Path] | None = None
    if resume:
        folder = store.paths(old_id).checkpoints
        checkpoint = latest_checkpoint(folder)
        # none here: the newest in the run's storage, downloaded before the ranks start
        remote = from_storage(store, old_id, old.storage) if checkpoint is None else None
        if remote is not None:
            seed, lineage = remote
        elif checkpoint is None:
            raise RunStateError(
                f"run {old_id} has no checkpoint (no complete step-N.pt or "
                f"step-N.pkl, sharded dcp/step-N, transformers checkpoint-N folder or "
                f"Lightning .ckpt in "
                f"{folder}{f', nor in its storage {old.storage}' if old.storage else ''}); "
                "use rerun to start it from the beginning"
            )
        else:
            lineage = {
                "resumed_from": old_id,
                "checkpoint": checkpoint.relative_to(folder).as_posix(),
            }
    tgt = get_target(target if target is not None else old.target.name, store.home)
    where = TargetSpec(tgt.name, price=dict(tgt.price))
    spec = replace(
        old,
        target=where,
        env=same_environment(old),
        params={**old.params, **overrides},
        lineage=lineage,
        origin={**old.origin, **submitter()},
        data=refresh_inputs(old.data, home=store.home),
    )

    def write(staging: Path) -> RunSpec:
        store.copy_snapshot(old_id, staging)
        check_copy(staging, old.code.hash, f"run {old_id}")
        return spec

    if checkpoint is not None:
        seed = lambda new_id: store.seed_checkpoint(new_id, checkpoint, folder)
    return start_run(store, tgt, write, seed)


def from_storage(
    store: Store, run_id: str, storage: str | None
) -> tuple[Callable[[str], Path], dict[str, Any]] | None:
    """(seed, lineage) of the newest complete checkpoint of run ``run_id`` in its storage
    that downloads whole (each file checked; a damaged one is passed over with a warning),
    or None: it is downloaded now, and the seed moves it into a new run's folder."""
    if not storage:
        return None
    from ..store.object_storage import for_run  # lazy: fsspec only for a run with storage

    remote = for_run(storage, store.home, run_id)
    staged = store.staging_dir().parent
    try:
        found = remote.newest_whole(run_id, staged / "checkpoints")
    except BaseException:
        store.discard_staging(staged / "code")
        raise
    if found is None:
        store.discard_staging(staged / "code")
        return None
    manifest, path = found
    rel = str(manifest["path"]).removeprefix("checkpoints/")
    lineage = {"resumed_from": run_id, "checkpoint": rel, "storage": storage}

    def seed(new_id: str) -> Path:  # moved, whole, into the new run's checkpoints/
        target = store.existing(new_id).checkpoints / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        except OSError as exc:
            raise StoreError(f"cannot place the checkpoint {rel} in run {new_id}: {exc}") from None
        finally:
            store.discard_staging(staged / "code")
        return target

    return seed, lineage


def with_kept_secrets(
    store: Store, run_id: str, spec: RunSpec, overrides: Mapping[str, Any]
) -> RunSpec:
    """``spec`` with the real values of its secret params, variables and script arguments,
    read from the run's owner-only file. Someone other than its owner gives each secret
    param again (``-p``); a secret variable of its environment or a secret argument cannot be
    given so: he submits the code again with his own. Raises ``SpecError`` naming what is
    missing."""
    values = run_secrets.read(store.paths(run_id).root)
    missing = [e for e in missing_secrets(spec, values) if e.partition(".")[2] not in overrides]
    if not missing:
        return with_secret_values(spec, values)
    params = [e.partition(".")[2] for e in missing if e.startswith("params.")]
    variables = [e.partition(".")[2] for e in missing if e.startswith("variables.")]
    need = []
    if params:
        need.append(
            f"its secret params {', '.join(params)}: give them again with "
            + " ".join(f"--param {p}=VALUE" for p in params)
        )
    if variables:
        need.append(
            f"its environment's secret variables {', '.join(variables)}: submit the code "
            "again with an environment of your own"
        )
    args = [e.partition(".")[2] for e in missing if e.startswith("args.")]
    if args:
        need.append(
            f"its secret script arguments (number {', '.join(args)}): submit the script "
            "again with arguments of your own"
        )
    shown = "; for ".join(need)
    raise SpecError(
        f"run {run_id} was given secrets that only its owner can read "
        f"({run_secrets.FILE} in its folder), and nothing was started; for {shown}"
    )


def start_trial(
    store: Store, sweep_id: str, number: int, params: Mapping[str, Any], staged: Path | None = None
) -> str:
    """Start trial ``number`` of sweep ``sweep_id``: a run of the sweep's template (its
    snapshot, environment lock, launch and target) with ``params`` over the template's;
    return the run's id. Its spec records the sweep and the trial's number. ``staged`` is a
    copy of the template's snapshot made ahead (``stage_template``), moved into the run."""
    from ..store.sweeps import SweepStore

    template = SweepStore(store.home).read_template(sweep_id)
    spec = replace(
        template,
        name=f"{template.name}.t{number}",
        env=same_environment(template),
        params={**template.params, **params},
        sweep=sweep_id,
        trial=number,
        data=refresh_inputs(template.data, home=store.home),
    )

    def write(staging: Path) -> RunSpec:
        if staged is not None:
            os.replace(staged, staging)
            store.discard_staging(staged)
        else:
            copy_template(store, sweep_id, staging)
        return spec

    return start_run(store, get_target(template.target.name, store.home), write)


def stage_template(store: Store, sweep_id: str) -> Path:
    """A checked copy of sweep ``sweep_id``'s template snapshot in a new staging folder."""
    staging = store.staging_dir()
    try:
        copy_template(store, sweep_id, staging)
    except BaseException:
        store.discard_staging(staging)
        raise
    return staging


def copy_template(store: Store, sweep_id: str, staging: Path) -> None:
    from ..store.sweeps import SweepStore

    sweeps = SweepStore(store.home)
    sweeps.copy_template(sweep_id, staging)
    check_copy(staging, sweeps.read_template(sweep_id).code.hash, f"sweep {sweep_id}")


def same_environment(spec: RunSpec):
    """``spec``'s environment for a new run of it: the recorded lock (or interpreter), never
    the name's newest definition; what was prepared for it is prepared again."""
    return replace(spec.env, prepared={}, python=spec.env.python if spec.env.name is None else None)


def check_copy(staging: Path, expected: str, owner: str) -> None:
    """Raise ``StoreError`` unless the snapshot copied to ``staging`` hashes to ``expected``."""
    from ..capture import hash_snapshot  # lazy: only a copied snapshot is hashed here

    found = hash_snapshot(staging)
    if found != expected:
        raise StoreError(
            f"the code snapshot of {owner} changed after it was written (its hash is {found}, "
            f"{expected} was recorded), so it is not the code that was captured; nothing was "
            "started (`jupyter-trainer doctor` reports a changed run snapshot)"
        )
