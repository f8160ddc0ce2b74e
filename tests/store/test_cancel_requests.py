"""An admin's cancel request left in the workspace (``store/requests.py``): acted on only when
the kernel says its file belongs to the owner or to a member of the admin group, and only
when it is newer than the process that reads it; a link or an oversized file tells nothing."""

from __future__ import annotations

import grp
import os
import time

from jupyter_trainer.store.owners import Identity
from jupyter_trainer.store.requests import KEEP_SECONDS, REQUESTS_DIR, read_cancel, write_cancel

SOMEONE = {"user": "someone-else", "uid": 4242, "hub_user": None}
MY_GROUP = grp.getgrgid(os.getegid()).gr_name


def test_a_request_from_an_admin_is_read_with_who_asked(tmp_path):
    path = write_cancel(tmp_path, "run", "r-1", "too slow", shared=False)
    assert path == tmp_path / REQUESTS_DIR / f"run-r-1.{os.geteuid()}.cancel"
    found = read_cancel(tmp_path, "run", "r-1", SOMEONE, MY_GROUP)
    me = Identity.current().name
    assert found == {
        "reason": f"too slow (asked by {me}, an admin)",
        "by": Identity.of_uid(os.geteuid()).record(),
    }
    assert read_cancel(tmp_path, "sweep", "r-1", SOMEONE, MY_GROUP) is None  # another kind
    assert read_cancel(tmp_path, "run", "r-10", SOMEONE, MY_GROUP) is None  # another id


def test_a_request_from_someone_not_allowed_is_ignored(tmp_path):
    write_cancel(tmp_path, "run", "r-1", "mine now", shared=False)
    assert read_cancel(tmp_path, "run", "r-1", SOMEONE, None) is None  # no admin group
    assert read_cancel(tmp_path, "run", "r-1", SOMEONE, "no-such-group-jt") is None
    assert read_cancel(tmp_path, "run", "r-1", None, MY_GROUP) is None  # no owner known


def test_a_request_older_than_its_reader_is_stale(tmp_path):
    write_cancel(tmp_path, "sweep", "s-1", "stop", shared=False)
    assert read_cancel(tmp_path, "sweep", "s-1", SOMEONE, MY_GROUP, since=time.time() + 5) is None
    assert read_cancel(tmp_path, "sweep", "s-1", SOMEONE, MY_GROUP, since=time.time() - 5)


def test_a_link_or_an_oversized_file_tells_nothing_more(tmp_path):
    folder = tmp_path / REQUESTS_DIR
    folder.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text('{"reason": "from a link"}')
    os.symlink(target, folder / "run-r-1.0.cancel")
    assert read_cancel(tmp_path, "run", "r-1", SOMEONE, MY_GROUP) is None
    (folder / f"run-r-2.{os.geteuid()}.cancel").write_text('{"reason": "' + "x" * 9000 + '"}')
    found = read_cancel(tmp_path, "run", "r-2", SOMEONE, MY_GROUP)
    assert found is not None and found["reason"].startswith("canceled (asked by")


def test_a_new_request_removes_its_writers_requests_older_than_a_day(tmp_path):
    old = write_cancel(tmp_path, "run", "r-old", "done long ago", shared=False)
    recent = write_cancel(tmp_path, "sweep", "s-recent", "an hour ago", shared=False)
    folder = tmp_path / REQUESTS_DIR
    others = folder / f"run-r-theirs.{os.geteuid() + 1}.cancel"
    others.write_text("{}")
    link = folder / f"run-r-link.{os.geteuid()}.cancel"
    os.symlink(tmp_path / "nowhere", link)
    day_ago = time.time() - KEEP_SECONDS
    os.utime(old, (day_ago - 60, day_ago - 60))
    os.utime(recent, (day_ago + 3600, day_ago + 3600))
    os.utime(others, (day_ago - 60, day_ago - 60))
    os.utime(link, (day_ago - 60, day_ago - 60), follow_symlinks=False)
    write_cancel(tmp_path, "run", "r-new", "now", shared=False)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [recent.name, others.name, link.name, f"run-r-new.{os.geteuid()}.cancel"]
    )
    assert read_cancel(tmp_path, "run", "r-old", SOMEONE, MY_GROUP) is None
    assert read_cancel(tmp_path, "sweep", "s-recent", SOMEONE, MY_GROUP)
