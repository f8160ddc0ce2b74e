"""Owners through the REST API, on a real in-process jupyter_server: everyone's runs are
listed with their owner, ``owner=mine`` lists one's own, and cancelling another user's run
or sweep is 403 and changes nothing."""

from __future__ import annotations

from support.made_runs import SOMEONE, new_run
from support.server_rest import expect_error, finished_run, get_json, jp_server_config  # noqa: F401 (jp_server_config: the server's configuration)

from jupyter_trainer.store import Store
from jupyter_trainer.store.owners import Identity

pytest_plugins = ["pytest_jupyter.jupyter_server"]


async def test_another_users_run_is_listed_and_cannot_be_canceled(jp_fetch, home):
    mine = finished_run(name="mine")
    store = Store(home)
    theirs = new_run(store, "theirs", owner=SOMEONE)
    listed = (await get_json(jp_fetch, "runs"))["runs"]
    owners = {row["id"]: row["owner"] for row in listed}
    assert owners == {mine.id: Identity.current().user, theirs: "someone-else"}
    assert [r["id"] for r in (await get_json(jp_fetch, "runs", owner="mine"))["runs"]] == [mine.id]
    error = await expect_error(jp_fetch, 400, "runs", params={"owner": "alice"})
    assert "owner=mine" in error["error"]
    error = await expect_error(jp_fetch, 403, "runs", theirs, "cancel", method="POST", body=b"")
    assert f"cannot cancel run {theirs}: it belongs to someone-else" in error["error"]
    assert store.cancel_request(theirs) is None
