"""Run records that another member wrote to break every reader: any member of a workspace
can make a folder in ``runs/`` and put a ``spec.json`` or ``state.json`` there nested ten
thousand levels deep. Each reader says the record is damaged, as for any other damage:
``show`` and ``doctor`` for every member (real Unix users, the real CLI), the REST API of a
real jupyter_server. ``doctor --fix`` says why it cannot fix a colleague's folder, and whose
it is, and goes on to fix the rest."""

from __future__ import annotations

import json
import os
import shutil

from support.server_rest import expect_error, finished_run, get_json, jp_server_config  # noqa: F401 (jp_server_config: the server's configuration)
from support.workspace_team import MAKE_RUN, Team

pytest_plugins = ["pytest_jupyter.jupyter_server"]

DEEP = "[" * 10000 + "]" * 10000
DEEP_OBJECT = '{"status": "completed", "created": 1, "x": ' + DEEP + "}"
PLANTED = "aaa-20260101-000000-000000"  # listed before every run made today


def plant(team: Team, user: str, run_id: str) -> None:
    """A run folder of ``user``'s with deeply nested records, as they can make one."""
    folder = team.workspace / "runs" / run_id
    folder.mkdir()
    shutil.chown(folder, user, team.group)
    os.chmod(folder, 0o2750)
    team.write(user, folder / "spec.json", DEEP)
    team.write(user, folder / "state.json", DEEP_OBJECT)


def test_a_colleagues_deeply_nested_records_are_damaged_for_show_and_doctor(team):
    alice, bob = team.users
    mine = team.python(alice, MAKE_RUN, "mine", "ended").stdout.strip()
    plant(team, bob, PLANTED)
    state = team.workspace / "runs" / mine / "state.json"
    team.run(alice, "sh", "-c", f"echo '{{' > {state}")  # damaged as a full disk might

    for args in (("show", PLANTED), ("show", PLANTED, "--json")):
        shown = team.cli(alice, *args, check=False)
        assert shown.returncode != 0
        assert "Traceback" not in shown.stderr and "RecursionError" not in shown.stderr
        assert "nests deeper than 100 levels" in shown.stderr, shown.stderr

    bobs = team.python(bob, MAKE_RUN, "deep-events", "ended").stdout.strip()
    events = team.workspace / "runs" / bobs / "events" / "rank-0.jsonl"
    metric = '{"kind": "metric", "step": %d, "t": 1.0, "values": {"loss": 0.5}}\n'
    deep = '{"kind": "tag", "t": 1.0, "values": {"x": ' + DEEP + "}}\n"
    team.write(bob, events, metric % 1 + deep + metric % 2)
    shown = team.cli(alice, "show", bobs, check=False)  # its events: the deep line skipped
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr

    looked = team.cli(alice, "doctor", "--no-hash", check=False)
    assert "Traceback" not in looked.stderr, looked.stderr
    assert f"run {PLANTED}: " in looked.stdout and "nests deeper" in looked.stdout
    assert f"run {mine}: " in looked.stdout, looked.stdout

    fixed = team.cli(alice, "doctor", "--no-hash", "--fix", check=False)
    assert "Traceback" not in fixed.stderr, fixed.stderr
    lines = {line.split(":")[0]: line for line in fixed.stdout.splitlines()}
    planted = lines[f"run {PLANTED}"]
    assert "--fix could not move the run aside" in planted, fixed.stdout
    assert f"it belongs to {bob}: ask {bob} or the workspace's administrator" in planted
    assert "fixed: rebuilt from the index row" in lines[f"run {mine}"], fixed.stdout
    assert json.loads(state.read_text())["status"] == "completed"
    assert (team.workspace / "runs" / PLANTED / "spec.json").read_text() == DEEP


async def test_deeply_nested_records_are_409_over_rest(jp_fetch, home):
    spec_run, state_run = finished_run(name="deep-spec"), finished_run(name="deep-state")
    spec = spec_run.store.paths(spec_run.id).spec
    state = state_run.store.paths(state_run.id).state
    kept = {path: path.read_text() for path in (spec, state)}
    for path, text in ((spec, DEEP), (state, DEEP_OBJECT)):
        os.chmod(path, 0o644)
        path.write_text(text)
    try:
        for run_id, path in ((spec_run.id, spec), (state_run.id, state)):
            error = await expect_error(jp_fetch, 409, "runs", run_id)
            assert error["type"] == "RecordDamaged", error
            assert f"{path} nests deeper than 100 levels" in error["error"]
            assert "doctor --fix" in error["error"]
        listed = (await get_json(jp_fetch, "runs"))["runs"]
        assert {r["id"] for r in listed} == {spec_run.id, state_run.id}
        # an event line just within what the parser takes, too deep for the answer
        events = spec_run.store.paths(spec_run.id).events_file(0)
        kept[events] = events.read_text()
        near = "[" * 900 + "]" * 900
        with open(events, "a") as out:
            out.write('{"kind": "tag", "t": 1.0, "values": {"deep": ' + near + "}}\n")
        read = await get_json(jp_fetch, "runs", spec_run.id, "events", rank="0")
        assert len(read["events"]) == 5, read["events"]  # the run's own, not the deep one
    finally:  # for the fixture's own check of the runs' processes
        for path, text in kept.items():
            path.write_text(text)
