"""A run's records carry a schema version, and a store written before they did still reads.

The JSON below is what the store and the supervisor wrote before records had a ``schema``
key (copied from a run of that code: ``Store.create``'s spec and the final state of a
completed run). Such a store must list, show and read exactly as before.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from jupyter_trainer.core.errors import StoreError
from jupyter_trainer.core.records import SPEC_SCHEMA, STATE_SCHEMA
from jupyter_trainer.frontends import cli
from jupyter_trainer.rankside.host.home import HOME_ENV
from jupyter_trainer.store import Store

RUN = "legacy-20261127-021815-b0ec92"

SPEC_BEFORE_VERSIONS = """{
 "carried": [],
 "code": {
  "args": [],
  "bytes": 0,
  "entry": "train.py",
  "excluded": [],
  "files": 0,
  "hash": "0000000000000000000000000000000000000000000000000000000000000000",
  "origin": "cell",
  "source_dir": null,
  "source_files": 0
 },
 "data": [],
 "env": {
  "image": null,
  "lock": null,
  "name": null,
  "prepared": {},
  "python": null,
  "variables": {},
  "version": null
 },
 "launch": {
  "backend": null,
  "launcher": "torchrun",
  "max_restarts": 0,
  "nodes": 1,
  "procs": 1
 },
 "lineage": {},
 "mlflow": null,
 "name": "legacy",
 "origin": {},
 "params": {
  "lr": 0.1
 },
 "sweep": null,
 "target": {
  "name": "local"
 },
 "trial": null,
 "watch": {
  "on_stall": "warn",
  "stall_timeout": 600.0,
  "stop_on_nan": []
 }
}
"""

STATE_BEFORE_VERSIONS = """{
 "backend": "gloo",
 "created": 1795745895.9353144,
 "ended": 1795745904.25,
 "environment": {
  "kind": "current"
 },
 "launcher": {
  "argv": [
   "python",
   "-m",
   "torch.distributed.run",
   "--nproc-per-node",
   "1",
   "_jt/boot.py",
   "train.py"
  ],
  "exit_code": 0,
  "pgid": 4242,
  "pid": 4242,
  "start_ticks": 123456
 },
 "python": "/usr/bin/python3",
 "rank_exit_codes": {
  "0": 0
 },
 "run_id": "legacy-20261127-021815-b0ec92",
 "snapshot": {
  "hash": "0000000000000000000000000000000000000000000000000000000000000000",
  "intact": true
 },
 "stages": {
  "finalizing": {
   "end": 1795745904.25,
   "start": 1795745903.5
  },
  "preparing": {
   "end": 1795745897.0,
   "start": 1795745896.1
  },
  "running": {
   "end": 1795745903.5,
   "start": 1795745897.0
  }
 },
 "status": "completed",
 "supervisor": {
  "host": "gpu-box",
  "pid": 4241,
  "start_ticks": 123400
 },
 "teardown": {
  "leftovers": []
 },
 "updated": 1795745904.25,
 "workdirs": {
  "kept": false
 }
}
"""

EVENTS_BEFORE_VERSIONS = (
    '{"kind": "metric", "t": 1795745898.5, "step": 1, "values": {"loss": 0.5}}\n'
    '{"kind": "progress", "t": 1795745898.6, "done": 1, "total": 2}\n'
    '{"kind": "metric", "t": 1795745899.5, "step": 2, "values": {"loss": 0.25}}\n'
)


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A store as the code before schema versions left it: no index yet, one run."""
    home = tmp_path / "home"
    run = home / "runs" / RUN
    for folder in ("code", "events", "logs", "ranks", "outputs"):
        (run / folder).mkdir(parents=True)
    (run / "code" / "train.py").write_text("print(1)\n")
    (run / "spec.json").write_text(SPEC_BEFORE_VERSIONS)
    (run / "state.json").write_text(STATE_BEFORE_VERSIONS)
    (run / "events" / "rank-0.jsonl").write_text(EVENTS_BEFORE_VERSIONS)
    (run / "logs" / "rank-0.log").write_text("epoch 1\nepoch 2\n")
    monkeypatch.setenv(HOME_ENV, str(home))
    return Store(home)


def test_a_store_written_before_schema_versions_lists_shows_and_reads(
    old_store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = old_store.list_runs()
    assert [(r["id"], r["status"], r["name"]) for r in rows] == [(RUN, "completed", "legacy")]

    state = old_store.read_state(RUN)
    # read as written; its owner, which the record never says, is its folder's
    owner = {"user": pwd.getpwuid(os.getuid()).pw_name, "uid": os.getuid(), "hub_user": None}
    assert state == {**json.loads(STATE_BEFORE_VERSIONS), "owner": owner}
    assert state["launcher"]["exit_code"] == 0
    spec = old_store.read_spec(RUN)
    assert (spec.name, spec.params, spec.launch.launcher) == ("legacy", {"lr": 0.1}, "torchrun")
    events, _ = old_store.read_events(RUN, 0)
    assert [e.get("step") for e in events if e["kind"] == "metric"] == [1, 2]
    assert old_store.read_log(RUN, 0)[0] == "epoch 1\nepoch 2\n"

    assert cli.main(["runs"]) == 0
    assert RUN in capsys.readouterr().out
    assert cli.main(["show", RUN]) == 0
    shown = capsys.readouterr().out
    assert RUN in shown and "completed" in shown


def test_new_records_carry_their_schema_version(tmp_path: Path) -> None:
    from jupyter_trainer.core.spec import CodeSpec, RunSpec

    store = Store(tmp_path / "home")
    snapshot = store.staging_dir()
    snapshot.mkdir(parents=True)
    (snapshot / "train.py").write_text("print(1)\n")
    code = CodeSpec(entry="train.py", hash="0" * 64)
    run_id = store.create(RunSpec(name="new", code=code), snapshot)
    paths = store.paths(run_id)
    assert json.loads(paths.spec.read_text())["schema"] == SPEC_SCHEMA
    assert json.loads(paths.state.read_text())["schema"] == STATE_SCHEMA
    assert store.read_state(run_id)["schema"] == STATE_SCHEMA
    assert store.read_spec(run_id).name == "new"


@pytest.mark.parametrize("record", ["state.json", "spec.json"])
def test_a_record_of_a_newer_schema_is_refused_with_the_fix(old_store: Store, record: str) -> None:
    path = old_store.paths(RUN).root / record
    data = json.loads(path.read_text())
    data["schema"] = 99
    path.write_text(json.dumps(data))
    read = old_store.read_state if record == "state.json" else old_store.read_spec
    with pytest.raises(StoreError, match="newer jupyter_trainer .*upgrade jupyter_trainer"):
        read(RUN)
