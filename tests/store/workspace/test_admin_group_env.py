"""``JUPYTER_TRAINER_ADMIN_GROUP`` cannot make a member an administrator: where the
workspace's ``config.toml`` names the admin group, a variable naming another one is refused
at once, with the fix, before anything is done."""

from __future__ import annotations

import time

from support.workspace_team import MAKE_RUN, PYTHON


def test_a_member_who_names_another_admin_group_is_refused_at_once(team):
    alice, bob = team.users
    running = team.python(bob, MAKE_RUN, "bobs-run", "waiting").stdout.strip()
    claim = f"JUPYTER_TRAINER_ADMIN_GROUP={team.group}"  # alice's own group
    for args in (("cancel", running), ("runs",)):
        began = time.monotonic()
        done = team.run(alice, claim, PYTHON, "-m", "jupyter_trainer", *args, check=False)
        assert time.monotonic() - began < 15, args
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"names {team.admins!r} as its admin group" in done.stderr, done.stderr
        assert "unset JUPYTER_TRAINER_ADMIN_GROUP" in done.stderr, done.stderr
    assert not list((team.workspace / "runs" / running).glob("cancel*"))
    assert not list((team.workspace).glob("requests/*"))
    same = f"JUPYTER_TRAINER_ADMIN_GROUP={team.admins}"  # what the workspace says: a no-op
    listed = team.run(alice, same, PYTHON, "-m", "jupyter_trainer", "runs")
    assert running in listed.stdout
    refused = team.run(alice, same, PYTHON, "-m", "jupyter_trainer", "cancel", running, check=False)
    assert f"cannot cancel run {running}: it belongs to {bob}" in refused.stderr
