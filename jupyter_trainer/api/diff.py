"""What differs between two runs: params, launch and target, environment packages, code and
metrics.

Read-only over the two run records: their ``spec.json``, the environment locks they name,
their ``code/`` snapshots and their events. ``RunDiff.text()`` is for a terminal,
``to_dict()`` for ``--json`` and ``chart_png()`` overlays the two runs' metrics, one axes per
metric, for a notebook.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capture.snapshot import RESERVED_DIR
from ..core.spec import EnvSpec, RunSpec, validate_run_id
from ..core.units import fmt_value
from ..environment import lock as locks
from ..rankside.programs.env_build import parse_lock, public_version
from ..rankside.rank import run_secrets
from ..store import Store
from ..store.follow import RunFollower, Series, downsample, finite_range
from ..store.metric_points import current_series

# The package's own files in a snapshot, not the user's code. The cell's script
# (_jt/cell.py) and its carried objects (_jt/carried.pkl) are the user's, and compared.
RUNTIME_PATHS = (f"{RESERVED_DIR}/boot.py", f"{RESERVED_DIR}/jupyter_trainer/")
CHART_POINTS = 2000


@dataclass(frozen=True)
class RunDiff:
    """The differences between run ``a`` and run ``b``; an empty section means "same"."""

    a: str
    b: str
    # added / removed: {key: value}; changed: {key: [a, b]}; uncompared: {key: [a, b]}, the
    # secret params whose values this user cannot read for both runs (only when there are any)
    params: dict[str, dict[str, Any]]
    launch: dict[str, list[Any]]  # {setting: [a, b]} for launch, target and watch settings
    environment: dict[str, Any]  # a, b: what each runs on; packages; note
    code: dict[str, Any]  # added, removed, changed, binary: paths; diff: unified
    metrics: dict[str, dict[str, Any]]  # {metric: {a: {final, min, max} | None, b: ...}}
    curves: dict[str, dict[str, Series]] = field(
        default_factory=dict, repr=False, compare=False
    )  # {metric: {run id: rank 0}}

    @property
    def same(self) -> bool:
        return not (
            any(self.params.values())
            or self.launch
            or _env_differs(self.environment)
            or _code_differs(self.code)
            or _metrics_differ(self.metrics)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: non-finite metric values as "nan", "inf" or "-inf"."""
        metrics = {
            name: {
                side: None if row is None else {k: _json_number(v) for k, v in row.items()}
                for side, row in by_run.items()
            }
            for name, by_run in self.metrics.items()
        }
        return {
            "a": self.a,
            "b": self.b,
            "same": self.same,
            "params": self.params,
            "launch": self.launch,
            "environment": self.environment,
            "code": self.code,
            "metrics": metrics,
        }

    def text(self) -> str:
        lines = [f"A = {self.a}", f"B = {self.b}"]
        lines += _section("params", _params_lines(self.params))
        lines += _section(
            "launch and target",
            [f"  {k}: {_show(a)} → {_show(b)}" for k, (a, b) in self.launch.items()],
        )
        lines += _section(
            "environment", _env_lines(self.environment), same=f"same ({self.environment['a']})"
        )
        lines += _section("code", _code_lines(self.code))
        lines += _section(
            "metrics (rank 0)",
            _metric_lines(self.metrics),
            same="same (final, min and max of every metric)" if self.metrics else "none logged",
        )
        return "\n".join(lines)

    def chart_figure(self, width: float = 6.0, height: float = 2.4) -> Any:
        """A matplotlib ``Figure``: one axes per metric, both runs as lines labelled with
        their ids; None when neither run logged a metric."""
        if not self.curves:
            return None
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(width, height * len(self.curves)), dpi=100)
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(self.curves), 1, squeeze=False)[:, 0]
        for ax, (name, by_run) in zip(axes, sorted(self.curves.items())):
            for run_id, series in by_run.items():
                xs = [s if s == s else i for i, s in enumerate(series.steps)]
                ax.plot(*downsample(xs, series.values, CHART_POINTS), label=run_id, linewidth=1.2)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # never a step 0.25
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        return fig

    def chart_png(self) -> bytes | None:
        """``chart_figure()`` as PNG bytes."""
        fig = self.chart_figure()
        if fig is None:
            return None
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()


def compare_runs(store: Store, a: str, b: str) -> RunDiff:
    """The ``RunDiff`` of runs ``a`` and ``b`` in ``store``."""
    a, b = validate_run_id(a), validate_run_id(b)
    spec_a, spec_b = store.read_spec(a), store.read_spec(b)
    metrics, curves = _compare_metrics(store, a, b)
    return RunDiff(
        a=a,
        b=b,
        params=_compare_secrets(
            _compare_params(spec_a.params, spec_b.params),
            (spec_a, run_secrets.read(store.paths(a).root)["params"]),
            (spec_b, run_secrets.read(store.paths(b).root)["params"]),
        ),
        launch=_compare_launch(spec_a, spec_b),
        environment=_compare_environments(store.home, spec_a.env, spec_b.env),
        code=_compare_code(store.paths(a).code, store.paths(b).code, spec_a, spec_b, a, b),
        metrics=metrics,
        curves=curves,
    )


# -- params, launch ---------------------------------------------------------------------------


def _compare_params(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        "added": {k: b[k] for k in sorted(set(b) - set(a))},
        "removed": {k: a[k] for k in sorted(set(a) - set(b))},
        "changed": {k: [a[k], b[k]] for k in sorted(set(a) & set(b)) if a[k] != b[k]},
    }


def _compare_secrets(
    params: dict[str, dict[str, Any]],
    a: tuple[RunSpec, Mapping[str, Any]],
    b: tuple[RunSpec, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """``params`` with the secret params both runs have compared by their real values (the
    records hold ``***`` for each): changed when they differ, and ``uncompared`` where one
    run's values are not this user's to read (a colleague's run)."""
    (spec_a, real_a), (spec_b, real_b) = a, b
    uncompared = {}
    for key in sorted(set(spec_a.params) & set(spec_b.params)):
        if f"params.{key}" not in spec_a.secrets and f"params.{key}" not in spec_b.secrets:
            continue
        shown = [spec_a.params[key], spec_b.params[key]]
        if key not in real_a or key not in real_b:
            uncompared[key] = shown
            params["changed"].pop(key, None)
        elif real_a[key] != real_b[key]:
            params["changed"][key] = shown
    if uncompared:
        params["uncompared"] = uncompared
    return params


def _launch_settings(spec: RunSpec) -> dict[str, Any]:
    data = spec.to_dict()
    return {**data["launch"], "target": data["target"]["name"], **data["watch"]}


def _compare_launch(a: RunSpec, b: RunSpec) -> dict[str, list[Any]]:
    left, right = _launch_settings(a), _launch_settings(b)
    return {
        k: [left.get(k), right.get(k)]
        for k in [*left, *(k for k in right if k not in left)]
        if left.get(k) != right.get(k)
    }


# -- environment ------------------------------------------------------------------------------


def _env_label(env: EnvSpec) -> str:
    if env.name is None:
        return f"the kernel's own Python ({env.python or 'unknown'}), no lock"
    return f"environment {env.name}@{env.version} (lock {env.lock})"


def _packages(home: Path, env: EnvSpec) -> dict[str, str] | None:
    """Package name -> version the environment's lock pins (over the base it layers on)."""
    found = locks.find(home, env.lock) if env.lock else None
    if found is None:
        return None
    base = (found.meta.get("base") or {}).get("packages") or {}
    pins = {e["name"]: e["version"] for e in parse_lock(found.text) if e["name"] and e["version"]}
    return {**{n: public_version(v) for n, v in base.items()}, **pins}


def _compare_environments(home: Path, a: EnvSpec, b: EnvSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"a": _env_label(a), "b": _env_label(b), "packages": None, "note": None}
    if a.name is None or b.name is None:
        if a.name is None and b.name is None:
            out["note"] = "both run on the kernel's own Python: no lock, packages not recorded"
        else:
            out["note"] = (
                f"run {'A' if a.name is None else 'B'} runs on the kernel's own "
                "Python and has no lock: its packages are not recorded"
            )
        return out
    if a.lock == b.lock:
        return out
    pa, pb = _packages(home, a), _packages(home, b)
    if pa is None or pb is None:
        missing = [label for label, p, env in (("A", pa, a), ("B", pb, b)) if p is None]
        out["note"] = (
            f"the lock of run {' and '.join(missing)} is not in this store "
            f"({locks.locks_dir(home)}): packages cannot be compared"
        )
        return out
    out["packages"] = _compare_params(pa, pb)
    return out


def _env_differs(env: dict[str, Any]) -> bool:
    return env["a"] != env["b"] or bool(env["packages"] and any(env["packages"].values()))


def _env_lines(env: dict[str, Any]) -> list[str]:
    if not _env_differs(env):
        return []
    lines = [f"  A: {env['a']}", f"  B: {env['b']}"] if env["a"] != env["b"] else []
    if env["note"]:
        lines.append(f"  {env['note']}")
    packages = env["packages"]
    if packages is not None:
        lines += _params_lines(packages, str) or ["  packages: same"]
    return lines


# -- code -------------------------------------------------------------------------------------


def _snapshot_files(root: Path) -> dict[str, Path]:
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if not rel.startswith(RUNTIME_PATHS):
                files[rel] = path
    return files


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _compare_code(
    root_a: Path, root_b: Path, a: RunSpec, b: RunSpec, id_a: str, id_b: str
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "added": [],
        "removed": [],
        "changed": [],
        "binary": [],
        "diff": "",
        "settings": {},
    }
    for key in ("entry", "args"):
        va, vb = getattr(a.code, key), getattr(b.code, key)
        if va != vb:
            out["settings"][key] = [
                list(va) if key == "args" else va,
                list(vb) if key == "args" else vb,
            ]
    if a.code.hash == b.code.hash:
        return out
    files_a, files_b = _snapshot_files(root_a), _snapshot_files(root_b)
    out["added"] = sorted(set(files_b) - set(files_a))
    out["removed"] = sorted(set(files_a) - set(files_b))
    chunks = []
    for rel in sorted(set(files_a) & set(files_b)):
        data_a, data_b = files_a[rel].read_bytes(), files_b[rel].read_bytes()
        if data_a == data_b:
            continue
        out["changed"].append(rel)
        text_a, text_b = _text(data_a), _text(data_b)
        if text_a is None or text_b is None:
            out["binary"].append(rel)
            continue
        chunks.append(
            "".join(difflib.unified_diff(text_a, text_b, fromfile=f"A/{rel}", tofile=f"B/{rel}"))
        )
    out["diff"] = "".join(c if c.endswith("\n") else c + "\n" for c in chunks)
    return out


def _code_differs(code: dict[str, Any]) -> bool:
    return any(code[k] for k in ("added", "removed", "changed", "settings"))


def _code_lines(code: dict[str, Any]) -> list[str]:
    lines = [f"  {k}: {_show(a)} → {_show(b)}" for k, (a, b) in code["settings"].items()]
    for key, what in (("added", "only in B"), ("removed", "only in A")):
        lines += [f"  {what}: {rel}" for rel in code[key]]
    lines += [f"  changed (binary): {rel}" for rel in code["binary"]]
    lines += ["  " + line for line in code["diff"].splitlines()]
    return lines


# -- metrics ----------------------------------------------------------------------------------


def _compare_metrics(
    store: Store, a: str, b: str
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Series]]]:
    tables: dict[str, dict[str, dict[str, float]]] = {}
    curves: dict[str, dict[str, Series]] = {}
    for run_id in (a, b):
        follower = RunFollower(store, run_id)
        follower.poll()
        tables[run_id] = {
            name: {"final": final, "min": lo, "max": hi}
            for name, final, lo, hi in metric_table(follower)
        }
        for name, by_rank in current_series(follower).items():
            series = by_rank[0] if 0 in by_rank else by_rank[min(by_rank)]
            if len(series):
                curves.setdefault(name, {})[run_id] = series
    names = sorted(set(tables[a]) | set(tables[b]))
    metrics = {name: {"a": tables[a].get(name), "b": tables[b].get(name)} for name in names}
    return metrics, curves


def _same_number(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


def _metrics_differ(metrics: dict[str, dict[str, Any]]) -> bool:
    for row in metrics.values():
        if row["a"] is None or row["b"] is None:
            return True
        if not all(_same_number(row["a"][k], row["b"][k]) for k in ("final", "min", "max")):
            return True
    return False


def _metric_lines(metrics: dict[str, dict[str, Any]]) -> list[str]:
    if not _metrics_differ(metrics):
        return []
    width = max(len("metric"), *(len(name) for name in metrics))
    head = "  ".join(f"{f'{side} {k}':>10}" for side in "AB" for k in ("final", "min", "max"))
    lines = [f"  {'metric':<{width}}  {head}"]
    for name, row in metrics.items():
        cells = [
            fmt_value(row[side][k]) if row[side] is not None else "-"
            for side in ("a", "b")
            for k in ("final", "min", "max")
        ]
        lines.append(f"  {name:<{width}}  " + "  ".join(f"{c:>10}" for c in cells))
    return lines


# -- text -------------------------------------------------------------------------------------


def _section(title: str, lines: list[str], same: str = "same") -> list[str]:
    return [f"{title}:", *lines] if lines else [f"{title}: {same}"]


def _params_lines(params: dict[str, dict[str, Any]], show: Any = None) -> list[str]:
    show = show or _show
    lines = [
        f"  {k}: {show(a)} → {show(b)}" + (" (secret values that differ)" if a == b else "")
        for k, (a, b) in params["changed"].items()
    ]
    lines += [f"  {k}: only in A ({show(v)})" for k, v in params["removed"].items()]
    lines += [f"  {k}: only in B ({show(v)})" for k, v in params["added"].items()]
    lines += [
        f"  {k}: {show(a)} and {show(b)}: secret, and not compared (only each run's owner "
        "can read its values)"
        for k, (a, b) in params.get("uncompared", {}).items()
    ]
    return lines


def _show(value: Any) -> str:
    return json.dumps(value)


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def metric_table(follower: RunFollower) -> list[tuple[str, float, float, float]]:
    """(metric, final, min, max) of rank 0 (or the lowest rank that logged it): what a diff
    compares."""
    rows = []
    for name, by_rank in follower.series.items():
        series = by_rank[0] if 0 in by_rank else by_rank[min(by_rank)]
        if len(series):
            rows.append((name, series.last, *finite_range(series.values)))
    return rows
