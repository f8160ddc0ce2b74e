"""Why a run hangs, from every rank's Flight Recorder dump: who is behind, in which collective.

Each rank's dump (``collectives/rank-<r>.json``, written by
``rankside/observe/flight_recorder.py``) lists its last collectives: the operation, the
process group, the sequence number within that group, the tensors' sizes and dtypes, when
the rank entered it and whether it completed. Ranks of one group call its collectives in the
same order, so the same sequence number on two ranks is the same call:

- the ranks that wait in the group's newest collective are *the others*; a rank whose last
  one is older is *behind* (it never entered that collective, or waits in an older one);
- the same sequence number with a different operation, shape or dtype is a *mismatch*
  (a rank whose call is the others' next one *skipped* a collective);
- a rank that enters each collective later than the others, consistently, is a
  *straggler*, named with how late it comes on average.

``analyse`` takes the dumps and, for the ranks it names, where each one is in the user's code
(the stall watch's py-spy stacks, ``stack_text.user_frame``) and returns the dict that
``Run.collectives()`` gives, with its one-line ``verdict``. Pure: it reads no file.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

DUMPS = "collectives"  # the run folder's subfolder
STACKS_FILE = "stacks.json"  # the named ranks' stacks and frames, by the stall watch
REQUEST_FILE = "request"
STRAGGLER_S = 0.05  # a straggler is at least this late on average
STRAGGLER_SHARE = 0.75  # ... and the last to come to at least this share of collectives
STRAGGLER_MIN = 5  # ... of at least this many
Row = dict[str, Any]


def read_dumps(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The ranks' dumps in ``run_dir/collectives``, by rank (unreadable ones left out)."""
    found: dict[int, dict[str, Any]] = {}
    for path in sorted((Path(run_dir) / DUMPS).glob("rank-*.json")):
        try:
            dump = json.loads(path.read_text(encoding="utf-8"))
            found[int(dump["rank"])] = dump
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def read_stacks(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The stacks the stall watch saved for the ranks an analysis named: rank -> {stack, frame}."""
    try:
        saved = json.loads((Path(run_dir) / DUMPS / STACKS_FILE).read_text(encoding="utf-8"))
        return {int(rank): entry for rank, entry in (saved.get("ranks") or {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def rows(dump: dict[str, Any]) -> list[Row]:
    """A dump's collectives, oldest first: pg, seq, op, sizes, dtypes, t (entered), done."""
    trace = dump.get("trace") or {}
    status = trace.get("pg_status") or {}
    out = []
    for entry in trace.get("entries") or []:
        if entry.get("is_p2p"):
            continue
        seq = int(entry.get("collective_seq_id", 0))
        pg_id = str(entry.get("pg_id", ""))
        completed = int((status.get(pg_id) or {}).get("last_completed_collective", -1))
        op = str(entry.get("profiling_name", "")).rpartition(":")[2] or "collective"
        group = entry.get("process_group") or [pg_id, ""]
        sizes, dtypes = entry.get("input_sizes") or [], entry.get("input_dtypes") or []
        out.append(
            {
                "pg": str(group[0]),
                "pg_desc": str(group[1]) if len(group) > 1 else "",
                "seq": seq,
                "op": op,
                "sizes": sizes,
                "dtypes": dtypes,
                "call": (op, repr(sizes), repr(dtypes)),
                "t": int(entry.get("time_created_ns", 0)) / 1e9,
                "done": bool(entry.get("retired"))
                or entry.get("state") == "completed"
                or seq <= completed,
            }
        )
    return out


def analyse(
    dumps: dict[int, dict[str, Any]], stacks: dict[int, dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The analysis ``Run.collectives()`` returns (the module's docstring); None without dumps."""
    if not dumps:
        return None
    stacks = stacks or {}
    world = max([r + 1 for r in dumps] + [int(d.get("world_size") or 0) for d in dumps.values()])
    by_rank = {rank: rows(dump) for rank, dump in dumps.items()}
    groups = sorted({row["pg"] for found in by_rank.values() for row in found}, key=_pg_key)
    hang = _hang_group(by_rank, groups)
    shown = hang or (groups[0] if groups else None)
    ranks: dict[int, dict[str, Any]] = {}
    for rank in range(world):
        last = _last(by_rank.get(rank), shown)
        state = "no dump" if rank not in dumps else "no collective"
        if last is not None:
            state = "completed" if last["done"] else "waiting"
        ranks[rank] = {
            "op": last and last["op"],
            "seq": last and last["seq"],
            "state": state,
            "pg": shown,
            "host": (dumps.get(rank) or {}).get("host"),
        }
    found: dict[str, Any] = {
        "behind": [],
        "op": None,
        "seq": None,
        "pg": shown,
        "since": None,
        "ranks": ranks,
        "mismatches": [m for g in groups for m in _mismatches(by_rank, g)][:10],
        "stragglers": _stragglers(by_rank, shown, world) if shown is not None else [],
        "stacks": {},
        "dumped": max(float(d.get("taken") or 0) for d in dumps.values()),
    }
    if hang is not None:
        found.update(_behind(by_rank, hang, world))
    named = set(found["behind"]) | {r for m in found["mismatches"][:1] for r in m["ranks"]}
    found["stacks"] = {r: stacks[r] for r in sorted(named) if r in stacks}
    found["verdict"] = verdict(found)
    return found


def _pg_key(pg: str) -> tuple[int, str]:
    return (int(pg), pg) if pg.isdigit() else (1 << 30, pg)


def _last(found: list[Row] | None, pg: str | None) -> Row | None:
    mine = [row for row in found or () if row["pg"] == pg]
    return max(mine, key=lambda row: row["seq"]) if mine else None


def _hang_group(by_rank: dict[int, list[Row]], groups: list[str]) -> str | None:
    """The group whose newest collective has the most ranks waiting in it, if any waits."""
    best, most = None, 0
    for pg in groups:
        waiting = [last for r in by_rank if (last := _last(by_rank[r], pg)) and not last["done"]]
        if len(waiting) > most:
            best, most = pg, len(waiting)
    return best


def _behind(by_rank: dict[int, list[Row]], pg: str, world: int) -> dict[str, Any]:
    lasts = {r: _last(found, pg) for r, found in by_rank.items()}
    waits = {r: last for r, last in lasts.items() if last is not None and not last["done"]}
    seq = max(last["seq"] for last in waits.values())
    others = {r: last for r, last in waits.items() if last["seq"] == seq}
    op = Counter(last["op"] for last in others.values()).most_common(1)[0][0]
    members = set(range(world)) if pg == _default(by_rank) else set(lasts)
    behind = []
    for rank in sorted(members - set(others)):
        last = lasts.get(rank)
        if last is None or last["seq"] < seq or rank not in by_rank:
            behind.append(rank)
    return {
        "behind": behind,
        "op": op,
        "seq": seq,
        "pg": pg,
        "waiting": sorted(others),
        "since": min(last["t"] for last in others.values()),
    }


def _default(by_rank: dict[int, list[Row]]) -> str | None:
    groups = sorted({row["pg"] for found in by_rank.values() for row in found}, key=_pg_key)
    return groups[0] if groups else None


def _call(row: Row) -> tuple[str, str, str]:
    """What a rank called, to compare with the others: operation, sizes and dtypes."""
    call: tuple[str, str, str] = row["call"]
    return call


def _mismatches(by_rank: dict[int, list[Row]], pg: str) -> list[dict[str, Any]]:
    """Sequence numbers of ``pg`` at which ranks called different collectives, oldest first."""
    calls: dict[int, dict[int, Row]] = {}
    for rank, found in by_rank.items():
        for row in found:
            if row["pg"] == pg:
                calls.setdefault(row["seq"], {})[rank] = row
    out = []
    for seq in sorted(calls):
        at = calls[seq]
        if len(at) < 2 or len({_call(row) for row in at.values()}) < 2:
            continue
        usual, _ = Counter(_call(row) for row in at.values()).most_common(1)[0]
        odd = sorted(r for r, row in at.items() if _call(row) != usual)
        if len(odd) * 2 == len(at) and min(at) in odd:  # a tie: the lowest rank is usual
            usual = _call(at[min(at)])
            odd = sorted(r for r, row in at.items() if _call(row) != usual)
        # the odd ranks' call is the others' next one: they skipped this one
        after = [row for r, row in calls.get(seq + 1, {}).items() if r not in odd]
        skipped = bool(after) and all(_call(at[r]) == _call(after[0]) for r in odd)
        sample = at[odd[0]]
        other = next(row for r, row in at.items() if r not in odd)
        kind = (
            "op"
            if sample["op"] != other["op"]
            else "shape"
            if sample["sizes"] != other["sizes"]
            else "dtype"
        )
        out.append(
            {
                "pg": pg,
                "seq": seq,
                "kind": "skipped" if skipped else kind,
                "ranks": odd,
                "calls": {
                    str(r): {"op": row["op"], "sizes": row["sizes"], "dtypes": row["dtypes"]}
                    for r, row in sorted(at.items())
                },
                "usual": {"op": other["op"], "sizes": other["sizes"], "dtypes": other["dtypes"]},
                "since": max(row["t"] for row in at.values()),
            }
        )
    return out


def _stragglers(by_rank: dict[int, list[Row]], pg: str, world: int) -> list[dict[str, Any]]:
    """Ranks that come to ``pg``'s collectives last, and late, consistently."""
    times: dict[int, dict[int, float]] = {}
    for rank, found in by_rank.items():
        for row in found:
            if row["pg"] == pg:
                times.setdefault(row["seq"], {})[rank] = row["t"]
    full = [at for at in times.values() if len(at) == world and world > 1]
    if len(full) < STRAGGLER_MIN:
        return []
    late: dict[int, list[float]] = {rank: [] for rank in range(world)}
    last: Counter[int] = Counter()
    for at in full:
        first = min(at.values())
        for rank, t in at.items():
            late[rank].append(t - first)
        last[max(at, key=lambda rank: at[rank])] += 1
    out = []
    for rank, gaps in late.items():
        mean = sum(gaps) / len(gaps)
        if mean >= STRAGGLER_S and last[rank] >= STRAGGLER_SHARE * len(full):
            out.append({"rank": rank, "late_s": round(mean, 4), "collectives": len(full)})
    return out


def clock(t: float) -> str:
    """A time of day as the verdicts show it (this machine's local time)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _where(found: dict[str, Any], rank: int) -> str:
    frame = (found["stacks"].get(rank) or {}).get("frame")
    if not frame:
        return ""
    file = str(frame.get("file"))
    place = "cell" if file.startswith("Cell In [") or file == "the cell" else file
    return f"; it is in {frame.get('function')}() at {place} line {frame.get('line')}"


def _shape(call: dict[str, Any]) -> str:
    sizes = call["sizes"]
    return " ".join(str(s) for s in sizes) if len(sizes) != 1 else str(sizes[0])


def verdict(found: dict[str, Any]) -> str:
    """The analysis in one line (docs/hangs.md says what each form means)."""
    if found["mismatches"]:
        m = found["mismatches"][0]
        odd, usual = m["ranks"], m["usual"]
        mine = m["calls"][str(odd[0])]
        who, seq = _ranks(odd), m["seq"]
        tail = _where(found, odd[0])
        if m["kind"] == "skipped":
            return (
                f"{who} skipped {usual['op']} #{seq}: {'its' if len(odd) == 1 else 'their'} "
                f"#{seq} is the others' #{seq + 1} ({mine['op']}){tail}"
            )
        if m["kind"] == "op":
            return (
                f"{who} called {mine['op']} #{seq} where the others called {usual['op']} "
                f"#{seq} (they wait there since {clock(m['since'])}){tail}"
            )
        if m["kind"] == "shape":
            what, theirs, ours = "shape", _shape(mine), _shape(usual)
        else:
            what, theirs, ours = "dtype", ", ".join(mine["dtypes"]), ", ".join(usual["dtypes"])
        return (
            f"{who} called {mine['op']} #{seq} with {what} {theirs} where the others used "
            f"{ours}{tail}"
        )
    behind = found["behind"]
    if behind:
        op, seq = found["op"], found["seq"]
        first = found["ranks"][behind[0]]
        verb = "is" if len(behind) == 1 else "are"
        since = f"(the others wait there since {clock(found['since'])})"
        if first["state"] == "waiting":
            how = f"it waits in {first['op']} #{first['seq']}, the others in {op} #{seq} {since}"
        elif first["state"] == "no dump":
            how = f"it left no dump; the others wait in {op} #{seq} {since}"
        else:
            how = f"it never entered {op} #{seq} {since}"
        if len(behind) > 1:
            how = how.replace("it ", f"rank {behind[0]} ", 1)
        return f"{_ranks(behind)} {verb} behind: {how}{_where(found, behind[0])}"
    if found["stragglers"]:
        s = found["stragglers"][0]
        return (
            f"rank {s['rank']} is a straggler: it enters each collective "
            f"{s['late_s'] * 1000:.0f} ms late on average (over {s['collectives']} collectives)"
        )
    if found["op"] is not None:
        return f"no rank is behind: every rank waits in {found['op']} #{found['seq']}"
    return "no rank is behind and none is late"
