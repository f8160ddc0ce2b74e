"""What ``jupyter-trainer doctor`` finds (``Finding``), the ``Report`` of one check of the
store, and what every part of it uses: recording a finding (repaired first when fixing),
checking a SQLite index against the folders it indexes, and telling a leftover folder that
nothing works on any more from one still being written."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ...core.errors import StoreError
from ...core.trust import user_name
from ..index_base import IndexBase

# A registration or a download writes, and a deletion removes, files all the time: a
# leftover folder whose newest change is older than this is no longer being worked on.
STALE_S = 600.0


@dataclass(frozen=True)
class Finding:
    """One problem: what is wrong (``message``), and what ``--fix`` did or would do."""

    # runs: index | unindexed | orphan-row | disagrees | lost | unreadable | snapshot;
    # models and data caches: see doctor.models and doctor.data
    check: str
    message: str
    run_id: str | None = None
    fix: str | None = None  # what --fix does; None: it cannot be fixed
    done: str | None = None  # what --fix did; None: not fixed
    subject: str | None = None  # what it is about when not a run ("model digits@2", ...)
    failed: str | None = None  # why --fix could not do what it would (and whose it is)

    @property
    def fixed(self) -> bool:
        return self.done is not None

    def line(self) -> str:
        where = (
            f"run {self.run_id}: " if self.run_id else (f"{self.subject}: " if self.subject else "")
        )
        if self.done:
            return f"{where}{self.message}; fixed: {self.done}"
        if self.failed:
            return f"{where}{self.message}; --fix could not {self.fix}: {self.failed}"
        if self.fix:
            return f"{where}{self.message}; --fix would {self.fix}"
        return f"{where}{self.message}"


@dataclass
class Report:
    home: Path
    runs: int = 0
    fix: bool = False
    findings: list[Finding] = field(default_factory=list)
    models: int = 0  # model versions checked
    data: int = 0  # data cache entries checked

    @property
    def unresolved(self) -> list[Finding]:
        return [f for f in self.findings if not f.fixed]

    def text(self) -> str:
        lines = [f.line() for f in self.findings]
        fixable = [f for f in self.unresolved if f.fix and not f.failed]
        checked = (
            _plural(self.runs, "run")
            + "".join(
                f", {_plural(n, what)}"
                for n, what in ((self.models, "model version"), (self.data, "data cache entry"))
                if n
            )
            + " checked"
        )
        if not self.findings:
            lines.append(f"no problems in {self.home} ({checked})")
        elif not self.unresolved:
            lines.append(f"{_count(self.findings)} found and fixed in {self.home} ({checked})")
        else:
            summary = f"{_count(self.unresolved)} in {self.home} ({checked})"
            if fixable:
                summary += (
                    f"; `jupyter-trainer doctor --fix` fixes "
                    f"{'it' if len(self.unresolved) == 1 else len(fixable)}"
                    f"{'' if len(self.unresolved) == 1 else ' of them'}"
                )
            lines.append(summary)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "home": str(self.home),
            "runs": self.runs,
            "models": self.models,
            "data": self.data,
            "fix": self.fix,
            "findings": [{**asdict(f), "fixed": f.fixed} for f in self.findings],
        }


def check_index(index: IndexBase, on_disk: int, check: str, report: Report) -> bool:
    """Whether ``index`` (of ``on_disk`` folders) can be read, as found or, with ``fix``,
    moved aside and rebuilt; a broken one is a finding named ``check``."""
    problem = index.problem()
    if problem is None or (problem == "is missing" and not on_disk):
        return True  # sound, or a store never used
    name = "the index" if index.LABEL == "run" else f"the {index.LABEL} index"
    folders = f"{index.LABEL} folder"
    finding = Finding(
        check,
        f"{name} {index.where} {problem}",
        None,
        f"move it aside and rebuild it from the {_plural(on_disk, folders)}",
    )
    if not report.fix:
        report.findings.append(finding)
        return False
    moved, count = index.rebuild(problem)
    done = (
        f"moved aside to {moved.name}, " if moved else ""
    ) + f"rebuilt from {_plural(count, folders)}"
    report.findings.append(replace(finding, done=done))
    return True


def _count(findings: list[Finding]) -> str:
    return _plural(len(findings), "problem")


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1] + 'ies' if word.endswith('ry') else word + 's'}"


def add(
    report: Report,
    finding: Finding,
    repair: Callable[[], Any],
    done: str,
    whose: Path | None = None,
) -> bool:
    """Record ``finding``, repaired first when fixing; True if it was repaired. A repair the
    filesystem or the index refuses (in a workspace, most often another member's folder,
    ``whose``) is recorded with the reason, and the check goes on with the next finding."""
    if report.fix:
        try:
            repair()
        except (OSError, StoreError) as exc:
            report.findings.append(replace(finding, failed=_refusal(exc, whose)))
            return False
        finding = replace(finding, done=done)
    report.findings.append(finding)
    return finding.fixed


def _refusal(exc: Exception, whose: Path | None) -> str:
    """Why a repair failed, in words, with whose the thing is when it is not this user's."""
    said = (
        f"{exc.strerror} ({exc.filename})"
        if isinstance(exc, OSError) and exc.strerror
        else str(exc)
    )
    try:
        owner = os.lstat(whose).st_uid if whose is not None else None
    except OSError:
        owner = None
    if owner is None or owner == os.geteuid():
        return said
    who = user_name(owner)
    return f"{said}; it belongs to {who}: ask {who} or the workspace's administrator to fix it"


def last_change(path: Path) -> float:
    """The newest modification time in ``path``'s tree (links not followed). A folder being
    copied into or removed changes all the time; one renamed out of place for deletion has
    its time set then (``ModelStore.delete_version``)."""
    newest = 0.0
    for folder, dirs, files in os.walk(path):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                continue
            newest = max(newest, st.st_mtime)
    return newest
