"""``nvidia-smi --query-compute-apps`` sampled from a thread while a run trains: which
processes held a CUDA context, how much memory each used, and whether every one was a rank."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any


class ComputeApps:
    """``nvidia-smi --query-compute-apps`` sampled from a thread while a run trains."""

    def __init__(self, interval: float) -> None:
        self.interval, self.smi = interval, shutil.which("nvidia-smi")
        self.samples: list[list[tuple[int, int]]] = []
        self.who: dict[int, dict[str, Any]] = {}  # each pid's command line and parent, when seen
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ComputeApps:
        if self.smi:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    [
                        self.smi,
                        "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                rows = [line.split(",") for line in out.splitlines()]
                apps = [
                    (int(r[0]), int(r[1]))
                    for r in rows
                    if len(r) == 2 and r[0].strip().isdigit() and r[1].strip().isdigit()
                ]
                self.samples.append(apps)
                for pid, _ in apps:
                    if pid not in self.who:
                        self.who[pid] = _describe_pid(pid)
            except (OSError, subprocess.TimeoutExpired) as e:
                self.errors.append(str(e))
            self._stop.wait(self.interval)

    def verdict(self, rank_pids: set[int]) -> dict[str, Any]:
        """Which pids held a CUDA context (largest MiB seen), and whether all were ranks:
        ``ok`` is None when nothing could be seen (no nvidia-smi, or it listed no process)."""
        seen: dict[int, int] = {}
        for apps in self.samples:
            for pid, mib in apps:
                seen[pid] = max(mib, seen.get(pid, 0))
        strangers = {
            pid: {
                **self.who.get(pid, {}),
                "child_of_rank": self.who.get(pid, {}).get("ppid") in rank_pids,
            }
            for pid in sorted(set(seen) - rank_pids)
        }
        return {
            "ok": None if not seen else not strangers,
            "samples": len(self.samples),
            "seen_mib": {str(p): m for p, m in sorted(seen.items())},
            "rank_pids": sorted(rank_pids),
            "not_ranks": {str(p): c for p, c in strangers.items()},
            "errors": self.errors[:3],
        }


def _describe_pid(pid: int) -> dict[str, Any]:
    """A process's command line and parent pid, read while it runs."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return {"cmdline": cmdline, "ppid": ppid}
    except (OSError, ValueError, IndexError):
        return {"cmdline": "(not readable)", "ppid": None}
