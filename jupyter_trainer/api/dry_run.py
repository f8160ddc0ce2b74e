"""``--dry-run``: a run checked and captured as a real submit does it, then shown, not started.

The same steps as ``start.start_run`` up to the target's command: the snapshot is captured
(into a temporary folder, outside the store), the target checks the spec, the environment
is resolved as far as it goes without a build (``environment.preview``), and the target
plans (``Target.dry_plan``, which changes nothing on the target) and builds its command.
Then ``Target.dry_run`` says what would be run. No run folder, no index row, no supervisor,
no environment build, no URL input downloaded (the server is only asked what it has),
nothing staged to a node and nothing submitted to a scheduler.

The run id is a placeholder (``<name>-dry-run``: a valid run id, DNS-1123 safe too), and so
is the run folder: the temporary folder that holds the snapshot while the target plans,
removed at the end. A real run gets ``<name>-<date>-<time>-<hex>`` and ``runs/<id>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from pathlib import Path
from typing import Any

from .. import environment
from ..core.spec import RunSpec, validate_run_id
from ..store import Store
from ..targets import Target

PLACEHOLDER_SUFFIX = "dry-run"


@dataclass(frozen=True)
class DryRun:
    """What a run would start, found by a dry run. ``text`` is what ``--dry-run`` prints (on
    the CLI's stdout, alone); ``header`` says what is a placeholder (the CLI's stderr)."""

    text: str
    header: str
    target: str  # the target's name
    kind: str  # its kind: local, ssh, slurm, ray, ...
    run_id: str  # the placeholder run id
    run_dir: str  # the placeholder run folder, as the target names it (the
    # local one is gone once the dry run ends)
    argv: tuple[str, ...]  # the launcher's argv (slurm: sbatch's, or a held run's srun)
    env: Mapping[str, str] = field(default_factory=dict)  # variables it is given
    env_defaults: Mapping[str, str] = field(default_factory=dict)  # given unless set
    nodes: tuple[Mapping[str, Any], ...] = ()  # per node: host, run_dir, argv, env (ssh, ray)
    script: str | None = None  # the batch script (slurm)
    notes: tuple[str, ...] = ()  # what could not be known without starting the run

    def __str__(self) -> str:
        return self.header + self.text

    def __repr__(self) -> str:
        return f"<DryRun {self.kind} target {self.target!r}: {len(self.text)} characters>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        """In a notebook: the header as a note, the text as the block it is."""
        return (
            f'<pre style="opacity: 0.7; white-space: pre-wrap">{escape(self.header)}</pre>'
            f"<pre>{escape(self.text)}</pre>"
        )


def placeholder_run_id(name: str) -> str:
    """``<name>-dry-run``, with the name cut as a real run id's is."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "run"
    return validate_run_id(f"{slug}-{PLACEHOLDER_SUFFIX}")


def dry_run(
    store: Store, target: Target, write: Callable[[Path], RunSpec], notes: Sequence[str] = ()
) -> DryRun:
    """Capture the run that ``write(staging)`` makes, check and plan it on ``target``, and
    return what it would start. Raises as ``start_run`` would; creates nothing. ``notes``:
    what was found before (a URL input that a submit would download), for the header."""
    scratch = Path(tempfile.mkdtemp(prefix="jt-dry-run-"))
    try:
        spec = write(scratch / "staging" / "code")
        run_id = placeholder_run_id(spec.name)
        run_dir = scratch / run_id
        run_dir.mkdir()
        os.replace(scratch / "staging" / "code", run_dir / "code")
        target.check(spec)
        env, env_notes = environment.preview(
            spec.env,
            run_dir / "code",
            spec.code.entry,
            target=target,
            launcher=spec.launch.launcher,
            home=store.home,
        )
        spec = replace(spec, env=env)
        (run_dir / "spec.json").write_text(json.dumps(spec.to_dict(), indent=1))
        backend = target.resolve_backend(spec.launch)
        plan = target.dry_plan(spec, run_id, str(run_dir), backend)
        if env.variables:  # as the supervisor adds them: the environment's, over the target's
            shown = spec.to_dict()["env"]["variables"]  # secret ones: the ranks' boot sets them
            plan = replace(plan, extra_env={**plan.extra_env, **shown})
        command = target.command(spec, plan)
        text = target.dry_run(spec, plan, command)
        parts = target.dry_run_parts(spec, plan, command)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    notes = [*notes, *env_notes, *parts.get("notes", ())]
    header = _header(target, run_id, plan.run_dir, spec, notes)
    return DryRun(
        text=text,
        header=header,
        target=target.name,
        kind=target.kind,
        run_id=run_id,
        run_dir=plan.run_dir,
        argv=tuple(parts.get("argv", command.argv)),
        env=dict(command.env),
        env_defaults=dict(command.env_defaults),
        nodes=tuple(parts.get("nodes", ())),
        script=parts.get("script"),
        notes=tuple(notes),
    )


def _header(target: Target, run_id: str, run_dir: str, spec: RunSpec, notes: list[str]) -> str:
    launch = spec.launch
    lines = [
        f"dry run on target {target.name!r} ({target.kind}): nothing was started and no "
        "run was created.",
        f"The run id {run_id!r} and its run folder {run_dir} are placeholders; a real run "
        "gets its own id (NAME-DATE-TIME-HEX) and folder, and may get other free ports.",
        f"{spec.name}: {launch.launcher}, {launch.nodes} node(s) x {launch.procs} "
        f"process(es), snapshot {spec.code.hash}",
    ]
    if spec.params:  # the ranks read them from the run's spec.json, not from the command
        shown = spec.to_dict()["params"]  # secret ones redacted, as spec.json has them
        lines.append("params (in spec.json): " + json.dumps(shown, sort_keys=True))
    lines += notes
    return "".join(f"# {line}\n" for line in lines)
