"""Who owns a sweep is the kernel's owner of its folder, as for runs: a sweep whose state
claims a colleague is still its folder owner's in the sweeps list, for a cancel and for its
driver, as real Unix users."""

from __future__ import annotations

import json
import pwd
import shutil

SCRIPT = "from jupyter_trainer import runtime as jt\njt.log(loss=lr)\n"

LIST = """
import json
from jupyter_trainer.frontends.server.sweeps import list_sweeps, sweep_row
from jupyter_trainer.store import Store
from jupyter_trainer.store.owners import Identity
from jupyter_trainer.store.sweeps import SweepStore
store = Store()
sweeps = SweepStore(store.home)
print(json.dumps({
    "mine": [r["id"] for r in list_sweeps(store, owner=Identity.current())],
    "rows": {i: sweep_row(sweeps, i)["owner"] for i in sweeps.ids()},
    "owner": {i: sweeps.owner(i)["user"] for i in sweeps.ids()},
}))
"""

CANCEL = """
import sys
from jupyter_trainer.core.errors import NotOwner
from jupyter_trainer.store import Store
from jupyter_trainer.store.sweeps import SweepStore
try:
    SweepStore(Store().home).request_cancel(sys.argv[1])
except NotOwner as exc:
    print("NotOwner", exc)
else:
    print("asked")
"""

DRIVER = """
import sys
from jupyter_trainer.api.sweeps.driver import SweepDriver
from jupyter_trainer.store import Store
print(SweepDriver(Store(), sys.argv[1]).owner["user"])
"""


def test_a_sweeps_state_cannot_name_its_owner(team):
    alice, bob = team.users
    script = team.root / bob / "train.py"
    script.write_text(SCRIPT)
    shutil.chown(script, bob)
    sweep_id = team.cli(
        bob, "sweep", "start", str(script), "--sweep", "lr=choice(0.1,0.2)", "--trials", "1",
        "--metric", "loss", "--launcher", "python", "--wait",
    ).stdout.strip().splitlines()[0]  # fmt: skip
    state_path = team.workspace / "sweeps" / sweep_id / "state.json"
    state = json.loads(state_path.read_text())
    assert state["owner"]["user"] == bob
    alice_uid = pwd.getpwnam(alice).pw_uid
    state["owner"] = {"user": alice, "uid": alice_uid, "hub_user": None}
    team.write(bob, state_path, json.dumps(state), 0o640)

    seen = json.loads(team.python(alice, LIST).stdout)
    assert sweep_id not in seen["mine"], seen
    assert seen["rows"][sweep_id] == bob and seen["owner"][sweep_id] == bob, seen
    assert sweep_id in json.loads(team.python(bob, LIST).stdout)["mine"]
    # alice may not cancel it: it is bob's, whatever its state says
    refused = team.python(alice, CANCEL, sweep_id).stdout
    assert refused.startswith("NotOwner") and bob in refused, refused
    # its driver answers cancels for bob (and the admins), not for whom the state names
    assert team.python(bob, DRIVER, sweep_id).stdout.strip() == bob
