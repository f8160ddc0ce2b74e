"""One run of the store written into one MLflow run, with ``MlflowClient`` and ``log_batch``.

The MLflow run lives in the experiment named like the run (``--name``; a run without a name
goes to ``$MLFLOW_EXPERIMENT_NAME``, else ``jupyter_trainer``), is named after the run id and
carries the tag ``jupyter_trainer.run_id``: a later mirror finds it (by the id kept in the
run's state, else by that tag) and updates it, never making a second one.

- params: the run's params, nested mappings flattened with dots (``opt.lr``); values as JSON
  text (``0.1``, ``true``, ``[64, 10]``), strings as they are.
- metrics: rank 0's values under the metric's name, rank R's under ``NAME/rank-R``; each
  point with its step (where none was logged, one past the metric's previous step, as the
  TensorBoard export does) and its time. MLflow keeps NaN, and stores ±inf as ±max double.
  Text values are not metrics: rank 0's last one is the tag ``jupyter_trainer.text.NAME``.
  Logging a point again is a no-op in MLflow, so a second mirror adds only what is new.
- the code's tags (``jt.tag``, ``mlflow.set_tag`` and the like in any rank): MLflow tags of
  their names; a tracker's param (the tag ``param.NAME``: ``mlflow.log_param``,
  ``wandb.config``) is the MLflow param NAME, unless the run's own params have NAME.
- tags: ``jupyter_trainer.*``: run id, status, target, launcher, backend, nodes, procs,
  world size, code hash, environment (name, lock, env id, python), each data input's hash and
  source, and the error of a failed run; the MLflow run's status and times follow the run's.
- artifacts: ``outputs/`` under ``outputs/``; each registered version of a model from this
  run (its files and ``lineage.json``) under ``models/NAME/VERSION/``, registered in MLflow's
  model registry as a version of NAME tagged ``jupyter_trainer.version`` (our number).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...core.errors import MissingExtra
from ...core.spec import RunSpec
from ...store import TERMINAL, Store
from ...store.follow import RunFollower
from ...store.models import ModelStore

EXTRA = "pip install jupyter_trainer[mlflow]"
DEFAULT_EXPERIMENT = "jupyter_trainer"
TAG = "jupyter_trainer."
RUN_TAG = TAG + "run_id"
VERSION_TAG = TAG + "version"
PARAM = (
    "param."  # a tracker's param NAME, as the rank side tags it (rankside/frameworks/trackers.py)
)
STATUS = {"completed": "FINISHED", "failed": "FAILED", "lost": "FAILED", "canceled": "KILLED"}
BATCH = 1000  # MLflow's log_batch limit: 1000 entries, of which 100 params or 100 tags
BATCH_PARAMS_TAGS = 100
PARAM_CHARS = 6000  # MLflow's longest param value
TAG_CHARS = 5000
_KEY = re.compile(r"[^\w\-. /]")
_INT64 = 2.0**63


def mlflow_modules() -> SimpleNamespace:
    """MLflow's client and entities; ``MissingExtra`` naming the extra without MLflow."""
    try:
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.exceptions import MlflowException
    except ImportError as exc:
        raise MissingExtra(
            f"MLflow is not installed here (no module {exc.name!r}): {EXTRA}"
        ) from None
    return SimpleNamespace(
        MlflowClient=MlflowClient,
        Metric=Metric,
        Param=Param,
        RunTag=RunTag,
        MlflowException=MlflowException,
    )


def experiment_name(spec: RunSpec, environ: Mapping[str, str] = os.environ) -> str:
    """The run's name, or (a run named by default, "cell") the default experiment."""
    if spec.name and spec.name != "cell":
        return spec.name
    return environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT


def key(name: str) -> str:
    """``name`` as an MLflow key: letters, digits, ``_-. /`` (others become ``_``)."""
    return _KEY.sub("_", name)[:250] or "_"


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mappings flattened with dots; values as JSON text, strings as they are."""
    out: dict[str, str] = {}
    for name, value in params.items():
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, f"{prefix}{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        out[key(f"{prefix}{name}")] = text[:PARAM_CHARS]
    return out


def run_tags(run_id: str, spec: RunSpec, state: Mapping[str, Any]) -> dict[str, str]:
    """What the MLflow run says of the run, as ``jupyter_trainer.*`` tags."""
    built = state.get("environment") or {}
    launch = spec.launch
    tags = {
        RUN_TAG: run_id,
        "status": state.get("status"),
        "name": spec.name,
        "target": spec.target.name,
        "launcher": launch.launcher,
        "backend": state.get("backend") or launch.backend,
        "nodes": launch.nodes,
        "procs": launch.procs,
        "world_size": launch.world_size,
        "code_hash": spec.code.hash,
        "env": f"{spec.env.name}@{spec.env.version}" if spec.env.name else None,
        "env_lock": spec.env.lock or built.get("lock"),
        "env_id": built.get("env_id") or spec.env.prepared.get("env_id"),
        "python": state.get("python") or built.get("python"),
        "sweep": spec.sweep,
        "trial": spec.trial,
        "error": state.get("error") if state.get("status") in ("failed", "lost") else None,
    }
    for data in spec.data:
        tags[f"data.{data.name}"] = data.hash
        tags[f"data.{data.name}.source"] = data.source
    out = {
        (k if k.startswith(TAG) else key(TAG + k)): str(v)[:TAG_CHARS]
        for k, v in tags.items()
        if v is not None
    }
    return out


def metric_points(follower: RunFollower) -> Iterator[tuple[str, float, int, int]]:
    """(MLflow key, value, timestamp in ms, step) of every value the run's ranks logged, and
    of their hardware figures as ``system/NAME`` (MLflow's own prefix for system metrics),
    each sample's step its number."""
    named = [*follower.series.items()]
    named += [(f"system/{name}", ranks) for name, ranks in follower.system.items()]
    for name, ranks in sorted(named):
        for rank, series in sorted(ranks.items()):
            label = key(name if rank == 0 else f"{name}/rank-{rank}")
            step = -1
            for logged, value, t in zip(series.steps, series.values, series.times):
                step = (
                    int(logged)
                    if math.isfinite(logged) and -_INT64 <= logged < _INT64
                    else step + 1
                )
                yield label, value, int(t * 1000), step


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """MLflow prints links to the UI on stdout; the mirror's stdout is its result."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


class Mirror:
    """Writes run ``run_id`` of ``store`` into the MLflow server at ``uri``."""

    def __init__(self, store: Store, run_id: str, uri: str, experiment: str | None = None) -> None:
        self.ml = mlflow_modules()
        self.store, self.run_id, self.uri = store, run_id, uri
        self.spec = store.read_spec(run_id)
        self.state = store.read_state(run_id)
        self.experiment = experiment or experiment_name(self.spec)
        self.client = self.ml.MlflowClient(tracking_uri=uri, registry_uri=uri)
        self.counts: dict[str, Any] = {}
        self._info: Any = None

    def run(
        self, known: str | None = None, *, model: tuple[str, int] | None = None
    ) -> dict[str, Any]:
        """Mirror the run (with ``model``: only the run's record and that model version);
        ``known`` is an MLflow run id from an earlier mirror. Returns what was written."""
        with _quiet_stdout():
            info = self._info = self._mlflow_run(known)
            self._log_batches(self._params_and_tags(), [])
            if model is None:
                follower = RunFollower(self.store, self.run_id)
                follower.poll()
                self._log_text_tags(follower)
                self._log_code_tags(follower)
                self._log_batches([], list(metric_points(follower)))
                self._log_outputs(info.artifact_uri)
            versions = [
                r
                for r in ModelStore(self.store.home).rows()
                if r["run_id"] == self.run_id
                and (model is None or (r["name"], r["version"]) == model)
            ]
            self.counts["models"] = [
                self._register(info, r["name"], r["version"]) for r in reversed(versions)
            ]
            self._set_status()
        return {
            "mlflow_run_id": info.run_id,
            "experiment": self.experiment,
            "experiment_id": info.experiment_id,
            **self.counts,
        }

    # -- the MLflow run ----------------------------------------------------------------------
    def _experiment_id(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except self.ml.MlflowException:  # made meanwhile by another mirror
            return self.client.get_experiment_by_name(self.experiment).experiment_id

    def _mlflow_run(self, known: str | None) -> Any:
        """The MLflow run of this run: the one an earlier mirror made, else a new one."""
        if known:
            try:
                run = self.client.get_run(known)
                if (
                    run.data.tags.get(RUN_TAG) == self.run_id
                    and run.info.lifecycle_stage == "active"
                ):
                    self.experiment = self.client.get_experiment(run.info.experiment_id).name
                    return run.info
            except self.ml.MlflowException:
                pass  # deleted, or another server: look for it by its tag
        experiment_id = self._experiment_id()
        found = self.client.search_runs(
            [experiment_id], f"tags.`{RUN_TAG}` = '{self.run_id}'", max_results=1
        )
        if found:
            return found[0].info
        created = self.state.get("created")
        return self.client.create_run(
            experiment_id,
            run_name=self.run_id,
            tags={RUN_TAG: self.run_id},
            start_time=int(created * 1000) if created else None,
        ).info

    def _set_status(self) -> None:
        status = self.state.get("status")
        if status in TERMINAL:
            ended = self.state.get("ended") or time.time()
            self.client.set_terminated(self._id, STATUS[status], end_time=int(ended * 1000))
        else:
            self.client.update_run(self._id, status="RUNNING")

    # -- params, tags, metrics ---------------------------------------------------------------
    def _params_and_tags(self) -> list[Any]:
        params = flat_params(self.spec.params)
        tags = run_tags(self.run_id, self.spec, self.state)
        self.counts["params"] = len(params)
        return [self.ml.Param(k, v) for k, v in params.items()] + [
            self.ml.RunTag(k, v) for k, v in tags.items()
        ]

    def _log_text_tags(self, follower: RunFollower) -> None:
        texts = {
            key(f"{TAG}text.{name}"): by_rank[0][:TAG_CHARS]
            for name, by_rank in follower.texts.items()
            if 0 in by_rank
        }
        self._log_batches([self.ml.RunTag(k, v) for k, v in texts.items()], [])

    def _log_code_tags(self, follower: RunFollower) -> None:
        """The tags the run's code set (``jt.tag``, a tracker's calls): each as an MLflow tag
        of its name, and a tracker's param (``param.NAME``) as the MLflow param NAME. A param
        of the run's own, or one this MLflow run already holds with another value (MLflow
        keeps a param's first value), stays a tag."""
        held = self.client.get_run(self._id).data.params
        own = flat_params(self.spec.params)
        entities: list[Any] = []
        for name, value in sorted(follower.tags.items()):
            if name.startswith(TAG):
                continue  # the mirror's own
            param = key(name[len(PARAM) :]) if name.startswith(PARAM) else None
            if (
                param
                and param not in own
                and held.get(param, value[:PARAM_CHARS]) == value[:PARAM_CHARS]
            ):
                entities.append(self.ml.Param(param, value[:PARAM_CHARS]))
            else:
                entities.append(self.ml.RunTag(key(name), value[:TAG_CHARS]))
        self.counts["tags"] = len(entities)
        self._log_batches(entities, [])

    def _log_batches(self, entities: list[Any], points: list[tuple[str, float, int, int]]) -> None:
        """``log_batch`` requests of at most ``BATCH_PARAMS_TAGS`` params and tags and at most
        ``BATCH`` entries in all."""
        Metric, Param = self.ml.Metric, self.ml.Param
        for start in range(0, len(entities), BATCH_PARAMS_TAGS):
            chunk = entities[start : start + BATCH_PARAMS_TAGS]
            self.client.log_batch(
                self._id,
                params=[e for e in chunk if isinstance(e, Param)],
                tags=[e for e in chunk if not isinstance(e, Param)],
            )
        for start in range(0, len(points), BATCH):
            self.client.log_batch(
                self._id,
                metrics=[Metric(k, v, t, s) for k, v, t, s in points[start : start + BATCH]],
            )
        if points:
            self.counts["metrics"] = len(points)

    @property
    def _id(self) -> str:
        return self._info.run_id

    # -- artifacts and models ----------------------------------------------------------------
    def _log_outputs(self, artifact_uri: str) -> None:
        """The files of ``outputs/``, copied first into a private folder the way ``download``
        copies them (a link is followed only to a file inside ``outputs/``, none is opened
        twice), so a link to a file elsewhere never reaches the server."""
        from ...store.outputs import copy_out, list_files

        outputs = self.store.paths(self.run_id).outputs
        files = list_files(outputs) if outputs.is_dir() else []
        if files:
            with tempfile.TemporaryDirectory(prefix=".mlflow-", dir=self.store.home) as staged:
                copy_out(outputs, files, Path(staged))
                self.client.log_artifacts(self._id, staged, "outputs")
        self.counts["artifacts"] = len(files)

    def _register(self, info: Any, name: str, version: int) -> str:
        """Version ``version`` of model ``name`` in MLflow's registry (once: a version that
        already carries our number and run is left as it is); ``NAME@MLFLOW_VERSION``."""
        for found in self.client.search_model_versions(f"name = '{name}'"):
            if (
                found.tags.get(VERSION_TAG) == str(version)
                and found.tags.get(RUN_TAG) == self.run_id
            ):
                return f"{name}@{found.version}"
        folder = ModelStore(self.store.home).version_dir(name, version)
        path = f"models/{name}/{version}"
        self.client.log_artifacts(self._id, str(folder), path)
        try:
            self.client.get_registered_model(name)
        except self.ml.MlflowException:
            try:
                self.client.create_registered_model(name)
            except self.ml.MlflowException:  # made meanwhile
                pass
        lineage = ModelStore(self.store.home).lineage(name, version)
        tags = {
            VERSION_TAG: str(version),
            RUN_TAG: self.run_id,
            **{key(f"{TAG}tag.{k}"): str(v) for k, v in (lineage.get("tags") or {}).items()},
        }
        made = self.client.create_model_version(
            name,
            source=f"{info.artifact_uri}/{path}/{lineage['path']}",
            run_id=info.run_id,
            tags=tags,
            description=f"{name}@{version} of the jupyter_trainer registry, from run {self.run_id}",
            await_creation_for=0,
        )
        return f"{name}@{made.version}"
