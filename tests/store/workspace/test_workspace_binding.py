"""``workspace.json`` binds a workspace's folder to its PostgreSQL database. It is written
only by someone every member trusts (the administrator), and read only when they wrote it,
so that no member can rebind the workspace for the others. Real Unix users, the real CLI,
a real PostgreSQL."""

from __future__ import annotations

import json
import os
import pwd
import stat

from support.workspace_team import MAKE_RUN


def test_only_the_administrator_writes_the_binding_and_a_members_is_refused(team):
    alice, bob = team.users
    binding = team.workspace / "workspace.json"
    team.cli(team.admin, "runs")  # the administrator's first use writes it
    admin = pwd.getpwnam(team.admin).pw_uid
    assert os.lstat(binding).st_uid == admin
    binding.unlink()  # lost: a member's use does not write it again, the database binds it
    made = team.python(alice, MAKE_RUN, "first", "ended").stdout.strip()
    assert not binding.exists()
    listed = json.loads(team.cli(bob, "runs", "--json").stdout)
    assert [r["id"] for r in listed] == [made]

    team.cli(team.admin, "runs")
    found = os.lstat(binding)
    assert found.st_uid == admin and not stat.S_IMODE(found.st_mode) & 0o022
    assert [r["id"] for r in json.loads(team.cli(bob, "runs", "--json").stdout)] == [made]

    binding.unlink()  # lost again, and then a member writes one of their own
    team.write(alice, binding, json.dumps({"id": "hers", "index": "postgresql"}), 0o640)
    refused = team.cli(bob, "runs", check=False)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr, refused.stderr
    assert (
        f"the workspace's binding to its index {binding} belongs to {alice}, not to you ({bob})"
    ) in refused.stderr, refused.stderr
    assert "only the workspace's administrator may write it: ask them to remove it" in (
        refused.stderr
    )
