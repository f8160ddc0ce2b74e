"""Upload a run's checkpoints and outputs to its storage as they arrive, on the machine that
follows the run, in a process of its own: training never waits on the network.

The supervisor starts ``python -m jupyter_trainer.supervisor.storage_upload RUN_DIR RUN_ID
URL`` (``Uploads.start``) with a pipe on its stdin. The uploader looks at the run's folder
every ``SCAN_S`` and uploads (``store.object_storage``):

- each complete sharded checkpoint (``checkpoints/dcp/step-N/``, complete as
  ``jt.checkpoint`` defines it) and each single-file one (``checkpoints/step-N.pt``);
- each complete checkpoint a framework saved under ``checkpoints/`` (a transformers
  ``checkpoint-N`` folder, a Lightning ``.ckpt``, an Accelerate ``save_state`` folder), as
  ``latest_checkpoint`` takes them;
- each file of ``outputs/`` once it has kept its size and time for one look (every one left
  at the end).

It writes what it did to ``storage.json`` in the run's folder after each upload. When the
supervisor closes the pipe (the run ended, its outputs collected), it makes a last pass and
exits; the supervisor waits for it at most ``$JT_STORAGE_WAIT`` seconds (``WAIT_S``), then
stops it and records the upload as incomplete. A supervisor that dies closes the pipe too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import TrainerError
from ..core.records import StateRecord
from ..rankside.host.home import HOME_ENV
from ..rankside.rank import dcp_checkpoint, rank_files
from ..store import write_json_atomic
from ..store.object_storage import Storage, for_run

SCAN_S = 0.5
WAIT_S = 300.0  # how long the end of a run waits for its uploads ($JT_STORAGE_WAIT)
WAIT_ENV = "JT_STORAGE_WAIT"
RECORD = "storage.json"
FRAMEWORK_STEP = re.compile(r"(?:checkpoint[-_]|step=)(\d+)")
TRIES = 3  # uploads of one path before it is given up


class Uploader:
    """Uploads what is new in the run folder ``root`` to ``storage``, recording in
    ``root/storage.json``."""

    def __init__(self, storage: Storage, run_id: str, root: Path) -> None:
        self.storage, self.run_id, self.root = storage, run_id, root
        self.uploaded: dict[str, tuple[Any, ...]] = {}  # path -> its files when uploaded
        self.seen: dict[str, tuple[Any, ...]] = {}  # output path -> its size and time last look
        self.tries: dict[str, int] = {}
        self.record: dict[str, Any] = {
            "url": storage.shown,
            "state": "uploading",
            "checkpoints": [],
            "outputs": {"files": 0, "bytes": 0},
            "errors": [],
        }

    def pending(self, final: bool) -> list[tuple[str, dict[str, Any], tuple[Any, ...], float]]:
        """(path, what it is, its signature, when it was complete) of each path to upload."""
        found = []
        dcp = self.root / "checkpoints" / dcp_checkpoint.FOLDER
        for step, folder in dcp_checkpoint.complete(str(dcp)):
            rel = f"checkpoints/{dcp_checkpoint.FOLDER}/step-{step}"
            sig = _signature(Path(folder))
            found.append((rel, {"kind": "dcp", "step": step}, sig, max(s[2] for s in sig) / 1e9))
        for step, name in rank_files.checkpoints(str(self.root / "checkpoints")):
            rel = f"checkpoints/{Path(name).name}"
            sig = _signature(Path(name))
            found.append((rel, {"kind": "file", "step": step}, sig, sig[0][2] / 1e9))
        for mtime, name in rank_files.framework_checkpoints(str(self.root / "checkpoints")):
            rel = Path(name).relative_to(self.root).as_posix()
            found.append((rel, _framework(rel, mtime), _signature(Path(name)), mtime / 1e9))
        outputs = self.root / "outputs"
        files: list[Path] = sorted(outputs.rglob("*")) if outputs.is_dir() else []
        for path in files:
            rel = path.relative_to(self.root).as_posix()
            if not path.is_file() or path.is_symlink() or path.name.startswith("."):
                continue
            sig = _signature(path)
            stable, self.seen[rel] = self.seen.get(rel) == sig, sig
            if stable or final:
                found.append((rel, {"kind": "output"}, sig, sig[0][2] / 1e9))
        return [f for f in found if self.uploaded.get(f[0]) != f[2]]

    def scan(self, final: bool = False) -> None:
        for rel, info, sig, complete_at in self.pending(final):
            if self.tries.get(rel, 0) >= TRIES:
                continue
            try:
                replace = rel in self.uploaded  # changed since: a step saved again
                manifest = self.storage.upload(self.run_id, self.root, rel, info, replace)
            except (TrainerError, OSError) as exc:
                if not (self.root / rel).exists():
                    continue  # removed while it was uploaded (a framework keeps the newest few)
                self.tries[rel] = self.tries.get(rel, 0) + 1
                self.record["errors"].append({"path": rel, "error": str(exc), "t": time.time()})
                self.save()
                continue
            self.uploaded[rel] = sig
            self.tries.pop(rel, None)
            self._note(rel, info, manifest, complete_at)
            self.save()

    def _note(self, rel: str, info: dict[str, Any], manifest: dict[str, Any], at: float) -> None:
        if info["kind"] == "output":
            self.record["outputs"]["files"] += 1
            self.record["outputs"]["bytes"] += manifest["bytes"]
            return
        entries = [c for c in self.record["checkpoints"] if c["path"] != rel]
        entries.append(
            {
                **info,
                "path": rel,
                "files": len(manifest["files"]),
                "bytes": manifest["bytes"],
                "complete_at": at,
                "uploaded_at": manifest["uploaded"],
                "lag_s": round(manifest["uploaded"] - at, 3),
            }
        )
        self.record["checkpoints"] = sorted(entries, key=lambda c: (c["step"], c["path"]))

    def end(self) -> None:
        failed = sorted({e["path"] for e in self.record["errors"]} - set(self.uploaded))
        self.record["state"] = "failed" if failed else "complete"
        if failed:
            self.record["failed"] = failed
            last = self.record["errors"][-1]["error"]
            self.record["error"] = f"{len(failed)} path(s) not uploaded ({failed[0]}, ...): {last}"
        self.save()

    def save(self) -> None:
        self.record["updated"] = time.time()
        write_json_atomic(self.root / RECORD, self.record)


def _framework(rel: str, mtime_ns: int) -> dict[str, Any]:
    """What a framework's checkpoint is: its step where its name gives one (transformers'
    ``checkpoint-N``, Lightning's ``step=N``, Accelerate's ``checkpoint_N``), and when it
    was saved (which orders them, as ``latest_checkpoint`` does)."""
    found = FRAMEWORK_STEP.findall(Path(rel).name)
    return {"kind": "framework", "step": int(found[-1]) if found else 0, "mtime_ns": mtime_ns}


def _signature(path: Path) -> tuple[Any, ...]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    out = []
    for p in files:
        st = p.stat()
        out.append((p.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(out)


def main(argv: list[str]) -> int:
    """``RUN_DIR RUN_ID URL``: upload until stdin closes, then a last pass."""
    root, run_id, shown = Path(argv[0]), argv[1], argv[2]
    home = Path(os.environ.get(HOME_ENV) or root.parent.parent)
    ended = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        ended.set()

    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
    try:
        uploader = Uploader(for_run(shown, home, run_id), run_id, root)
    except TrainerError as exc:
        write_json_atomic(root / RECORD, {"url": shown, "state": "failed", "error": str(exc)})
        return 1
    uploader.save()
    while not ended.wait(SCAN_S):
        uploader.scan()
    uploader.scan(final=True)
    uploader.end()
    return 0 if uploader.record["state"] == "complete" else 1


class Uploads:
    """The supervisor's handle on the uploader of its run (nothing without storage)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, root: Path) -> None:
        self.proc, self.root = proc, root

    @classmethod
    def start(cls, home: Path, root: Path, run_id: str, storage: str | None) -> Uploads:
        if not storage:
            return cls(None, root)
        try:
            (root / "logs").mkdir(parents=True, exist_ok=True)
            with open(root / "logs" / "storage.log", "ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(root), run_id, storage],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=log,
                    env={**os.environ, HOME_ENV: str(home)},
                )
        except OSError as exc:  # the run goes on; its record says why nothing was uploaded
            failed = {"url": storage, "state": "failed", "error": f"no uploader: {exc}"}
            with contextlib.suppress(OSError):
                write_json_atomic(root / RECORD, failed)
            return cls(None, root)
        return cls(proc, root)

    def finish(self, log: Callable[[str], None]) -> StateRecord:
        """Let the uploader make its last pass, within ``WAIT_S``; the storage record for
        the run's state (empty without storage)."""
        if self.proc is None:
            record = read_record(self.root)
            return {"storage": record} if record else {}
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        limit = float(os.environ.get(WAIT_ENV) or WAIT_S)
        try:
            self.proc.wait(timeout=limit)
            late = None
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            late = f"the uploads did not end within {limit:g} s (${WAIT_ENV}); they were stopped"
        record = read_record(self.root)
        if late:
            record.update(state="incomplete", error=late)
        if record.get("error"):
            log(f"storage: {record['error']}")
        return {"storage": record}


def read_record(root: Path) -> dict[str, Any]:
    """The upload record of the run folder ``root`` (``storage.json``), or {}."""
    try:
        found = json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
