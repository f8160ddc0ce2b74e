"""Sleep until a folder changes, or a timeout passes.

Readers of the run store (``Run.wait``, the sweep driver) wait for a file another process
writes (a run's ``state.json``, a trial's events). inotify (through ``inotify_simple``)
wakes them the moment it is written, instead of at their next poll. Where inotify is
missing or cannot watch the folder (some network filesystems never report other hosts'
writes), ``wait`` still returns after its timeout, so a caller that loops and looks again
is correct either way, only slower.
"""

from __future__ import annotations

import time
from typing import Any


class Waker:
    def __init__(self) -> None:
        try:
            from inotify_simple import INotify, flags

            self.inotify: Any = INotify()
            self.mask = flags.MOVED_TO | flags.CLOSE_WRITE | flags.MODIFY | flags.CREATE
        except (ImportError, OSError):
            self.inotify = None
        self.watches: dict[str, int] = {}

    @property
    def watching(self) -> bool:
        return bool(self.watches)

    def watch(self, *paths: Any) -> None:
        for path in map(str, paths):
            if self.inotify is not None and path not in self.watches:
                try:
                    self.watches[path] = self.inotify.add_watch(path, self.mask)
                except OSError:
                    pass

    def forget(self, *paths: Any) -> None:
        for path in map(str, paths):
            wd = self.watches.pop(path, None)
            if wd is not None:
                try:
                    self.inotify.rm_watch(wd)
                except OSError:  # the folder is gone, and its watch with it
                    pass

    def wait(self, timeout: float, poll: float) -> None:
        """Until a watched folder changes (at most ``timeout`` s), or ``poll`` s where
        nothing is watched."""
        if self.inotify is None or not self.watches:
            time.sleep(poll)
        else:
            self.inotify.read(timeout=max(1, int(timeout * 1000)))

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None
        self.watches.clear()

    def __enter__(self) -> Waker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
