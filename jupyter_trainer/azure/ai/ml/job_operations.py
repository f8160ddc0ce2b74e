"""``ml_client.jobs``: create a v2 job as a run (a command job) or a sweep (a sweep job) of
this store, and follow, fetch, download and cancel it by name."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ....api import runs as api
from ....api.sweeps.functions import sweep
from ....core.errors import RunFailed
from .command_job import CommandJob
from .exceptions import JobException, ValidationException
from .job_handle import Job
from .submission import ENTRY, job_file, run_options, staged
from .sweep.job import SweepJob

STREAM_INTERVAL_S = 0.5


class _Poller:
    """v2's long-running operation (``begin_cancel``): already done when it is returned."""

    def result(self, timeout: float | None = None) -> None:
        return None

    def wait(self, timeout: float | None = None) -> None:
        return None

    def done(self) -> bool:
        return True


class JobOperations:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._specs: dict[str, Any] = {}

    @property
    def _home(self) -> Path:
        return self._client.workspace.home

    def create_or_update(self, job: Any, *, compute: str | None = None, **kwargs: Any) -> Job:
        """Start ``job`` (``command(...)`` or its ``.sweep(...)``); everything is checked
        before anything starts. Returns the job, named after its run (or sweep)."""
        if isinstance(job, SweepJob):
            name = self._start_sweep(job, compute)
        elif isinstance(job, CommandJob):
            name = self._start_command(job, compute)
        else:
            raise ValidationException(
                f"jobs.create_or_update takes a command job (command(...)) or a sweep job "
                f"(command(...).sweep(...)), not {type(job).__name__}: pipelines and AutoML "
                "are not offered here (docs/azure-v2.md)"
            )
        self._specs[name] = job.trial if isinstance(job, SweepJob) else job
        return Job(name, self._home, job)

    begin_create_or_update = create_or_update

    def _start_command(self, job: CommandJob, compute: str | None) -> str:
        spec, data = job_file(job, self._client, set())
        options = run_options(job, self._client, compute)
        with staged(job, spec) as folder:
            run = api.submit(script=str(folder / ENTRY), source=str(folder), data=data, **options)
        if not isinstance(run, api.Run):
            raise TypeError("a dry run has no run")
        if job.tags:
            run.store.set_run_tags(run.id, {str(k): str(v) for k, v in job.tags.items()})
        return run.id

    def _start_sweep(self, job: SweepJob, compute: str | None) -> str:
        space = job.space()
        sweep_options = job.options()
        trial = job.trial
        spec, data = job_file(trial, self._client, set(space))
        options = run_options(trial, self._client, compute or job.compute)
        if job.experiment_name:
            options["name"] = job.experiment_name
        with staged(trial, spec) as folder:
            handle = sweep(
                space=space,
                script=str(folder / ENTRY),
                source=str(folder),
                data=data,
                **sweep_options,
                **options,
            )
        return handle.id

    def get(self, name: str) -> Job:
        job = Job(name, self._home, self._specs.get(name))
        job.deliver(self._client.workspace)
        return job

    def list(self, *, parent_job_name: str | None = None, **kwargs: Any) -> list[Job]:
        """A sweep's trials (``parent_job_name``), or the store's runs, newest first."""
        if parent_job_name is not None:
            parent = self.get(parent_job_name)
            trials = parent.sweep.trials() if parent.sweep is not None else []
            return [Job(t.id, self._home) for t in trials]
        return [Job(r.id, self._home) for r in api.runs(limit=100, home=self._home)]

    def stream(self, name: str, out: TextIO | None = None) -> None:
        """Print the job's output (rank 0's; a sweep's trials as they end) until it ends, as
        v2 streamed it; raise ``JobException`` if it failed or was canceled."""
        out = out or sys.stdout
        job = self.get(name)
        print(f"RunId: {name}\nWeb View: {job.studio_url}\n", file=out, flush=True)
        if job.sweep is not None:
            self._stream_sweep(job, out)
        else:
            self._stream_run(job, out)
        job = self.get(name)
        print(
            f"\nExecution Summary\n=================\nRunId: {name}\nWeb View: {job.studio_url}\n",
            file=out,
            flush=True,
        )
        if job.status != "Completed":
            error = ""
            if job.run is not None:
                try:
                    job.run.raise_for_status()
                except RunFailed as exc:
                    error = f": {exc}"
            raise JobException(
                f"job {name} ended {job.status}{error}", run_id=name, status=job.status
            )

    def _stream_run(self, job: Job, out: TextIO) -> None:
        run = job.run
        if run is None:
            return
        store, offset, shown = run.store, 0, False
        while True:
            done = run.done
            text, offset = store.read_log(run.id, 0, offset)
            if text and not shown:
                print("Streaming user_logs/std_log_process_0.txt\n" + "=" * 41 + "\n", file=out)
                shown = True
            out.write(text)
            out.flush()
            if done:
                rest, offset = store.read_log(run.id, 0, offset)
                out.write(rest)
                out.flush()
                return
            time.sleep(STREAM_INTERVAL_S)

    def _stream_sweep(self, job: Job, out: TextIO) -> None:
        found = job.sweep
        if found is None:
            return
        shown: dict[Any, str] = {}
        while True:
            done = found.done
            for row in found.table():
                if shown.get(row["number"]) != row["status"]:
                    shown[row["number"]] = row["status"]
                    print(
                        f"trial {row['number']} ({row['run']}): {row['status']} "
                        f"{row['params']} objective={row['objective']}",
                        file=out,
                        flush=True,
                    )
            if done:
                try:
                    found.wait(timeout=30)
                except Exception:  # the status line says how it ended
                    pass
                return
            time.sleep(STREAM_INTERVAL_S)

    def download(
        self,
        name: str,
        *,
        download_path: str | Path = ".",
        output_name: str | None = None,
        all: bool = False,
    ) -> None:
        """As v2: a named output to ``DOWNLOAD_PATH/named-outputs/NAME``; the job's files
        (``outputs/``, ``logs/``, ``user_logs/``) to ``DOWNLOAD_PATH/artifacts``; both with
        ``all``."""
        job = self.get(name)
        run = job.run
        if run is None:
            best = job.sweep.best() if job.sweep is not None else None
            if best is None:
                raise ValidationException(f"sweep {name} has no completed trial to download")
            run = best
        target = Path(download_path).expanduser()
        outputs = run.outputs
        names = [output_name] if output_name else []
        if all:
            names = (
                sorted(p.name for p in outputs.iterdir() if p.is_dir()) if outputs.is_dir() else []
            )
        for out_name in names:
            source = outputs / str(out_name)
            if not source.exists():
                raise ValidationException(
                    f"job {name} has no output {out_name!r} (its outputs/ holds "
                    f"{sorted(p.name for p in outputs.iterdir()) if outputs.is_dir() else 'nothing'})"
                )
            _copy(source, target / "named-outputs" / str(out_name))
        if output_name is None or all:
            artifacts = target / "artifacts"
            if outputs.is_dir():
                _copy(outputs, artifacts / "outputs")
            for rank in run.store.ranks(run.id):
                log = run.store.paths(run.id).log_file(rank)
                if log.is_file():
                    (artifacts / "user_logs").mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(log, artifacts / "user_logs" / f"std_log_process_{rank}.txt")

    def cancel(self, name: str) -> None:
        job = self.get(name)
        if job.sweep is not None:
            job.sweep.cancel()
        elif job.run is not None:
            job.run.cancel(reason="canceled from the notebook (ml_client.jobs.cancel)")

    def begin_cancel(self, name: str) -> _Poller:
        self.cancel(name)
        return _Poller()

    def archive(self, name: str) -> None:
        """Nothing to archive: runs stay in the store until removed."""


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


__all__ = ["JobOperations"]
