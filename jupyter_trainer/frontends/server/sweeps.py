"""REST handlers of sweeps: the list, one sweep with every trial, cancel; and which runs are
trials of a sweep, so that the runs list can leave them to their sweep's row.

``GET sweeps`` lists one row per sweep, newest first (``limit``, ``offset``, ``status``,
``name`` as for runs); ``GET sweeps/SWEEP`` answers what ``jupyter-trainer sweep show SWEEP
--json`` prints, each trial with the value it reported when it has no objective;
``POST sweeps/SWEEP/cancel`` asks the sweep's driver to cancel it and its running trials
(202), or 409 once the sweep has ended; ``GET sweeps/SWEEP/view`` upgrades to a WebSocket
that feeds the sweep view, as ``runs/RUN/view`` feeds the run view. A sweep id is checked
before any path is built from it: a malformed one answers 400, an unknown one 404.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.utils import url_path_join
from tornado.ioloop import IOLoop

from ...api.sweeps.functions import get_sweep
from ...core.errors import InvalidRunId, SpecError, TrainerError
from ...core.spec import validate_run_id
from ...store import Store
from ...store.owners import Identity, may_act, verified_owner
from ...store.sweeps import SWEEP_ACTIVE, SWEEP_TERMINAL, SweepStore
from ..views.sweep_feeder import SweepFeeder
from ..views.sweep_text import sweep_json
from .base import BaseHandler, status_of
from .view import FeedSocket, check_message

SWEEP = r"(?P<sweep_id>[^/]+)"
SWEEP_STATUSES = (*SWEEP_ACTIVE, "interrupted", *SWEEP_TERMINAL)
TRIAL_ENDED = ("completed", "pruned", "failed", "canceled")


def checked_sweep_id(sweep_id: str) -> str:
    """``sweep_id`` if it is a safe path segment; a 400 that says what a sweep id is, if not."""
    try:
        return validate_run_id(sweep_id)
    except InvalidRunId:
        shown = sweep_id if len(sweep_id) <= 80 else sweep_id[:80] + "..."
        raise InvalidRunId(
            f"invalid sweep id {shown!r}: a sweep id is 1-128 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit; list sweep ids "
            "with `jupyter-trainer sweeps`"
        ) from None


def sweep_row(
    sweeps: SweepStore, sweep_id: str, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What the sweeps list shows of one sweep (its ``state``, read here if not given): no
    trial in full, their counts by status."""
    spec = sweeps.read_spec(sweep_id)
    state = sweeps.read_state(sweep_id) if state is None else state
    trials = state.get("trials") or []
    counts = Counter(t["status"] for t in trials)
    owner = verified_owner(state.get("owner"), sweeps.paths(sweep_id).root) or {}
    return {
        "id": sweep_id,
        "name": spec.get("name") or sweep_id,
        "status": state["status"],
        "metric": state.get("metric") or spec.get("metric"),
        "goal": state.get("goal") or spec.get("goal"),
        "trials_started": len(trials),
        "trials_done": sum(counts[s] for s in TRIAL_ENDED),
        "trials_total": state.get("trials_total") or spec.get("trials"),
        "parallel": state.get("parallel") or spec.get("parallel"),
        "counts": dict(counts),
        "best": state.get("best"),
        "created": state["created"],
        "owner": owner.get("user"),
        "hub_user": owner.get("hub_user"),
        "started": state.get("started"),
        "ended": state.get("ended"),
        "error": state.get("error"),
    }


def list_sweeps(
    store: Store,
    status: str | None = None,
    name: str | None = None,
    owner: Identity | None = None,
) -> list[dict]:
    """Every sweep's row, newest first; a sweep removed or half-written meanwhile is left out.
    ``owner``: only that user's."""
    if status is not None and status not in SWEEP_STATUSES:
        raise SpecError(
            f"unknown sweep status {status!r}; choose one of {', '.join(SWEEP_STATUSES)}"
        )
    sweeps = SweepStore(store.home)
    rows = []
    for sweep_id in sweeps.ids():
        try:
            state = sweeps.read_state(sweep_id)
            row = sweep_row(sweeps, sweep_id, state)
        except (TrainerError, OSError, ValueError, KeyError):
            continue
        if status and row["status"] != status:
            continue
        if name and name.casefold() not in row["name"].casefold():
            continue
        if owner is not None:
            found = verified_owner(state.get("owner"), sweeps.paths(sweep_id).root)
            if not may_act(found, owner, None):
                continue
        rows.append(row)
    return rows


class SweepsHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        await self._execute_guarded(self._get())

    async def _get(self) -> None:
        limit, offset, status, name = self.list_args("sweep")
        rows = list_sweeps(self.store, status, name, self.owner_arg())
        self.write_json(
            {
                "sweeps": rows[offset : offset + limit],
                "limit": limit,
                "offset": offset,
                "more": len(rows) > offset + limit,
            }
        )


class SweepHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self, sweep_id: str) -> None:
        await self._execute_guarded(self._get(sweep_id))

    async def _get(self, sweep_id: str) -> None:
        sweep = get_sweep(checked_sweep_id(sweep_id), home=self.store.home)
        self.write_json(sweep_json(sweep))


class SweepCancelHandler(BaseHandler):
    @tornado.web.authenticated
    async def post(self, sweep_id: str) -> None:
        await self._execute_guarded(self._post(sweep_id))

    async def _post(self, sweep_id: str) -> None:
        sweep = get_sweep(checked_sweep_id(sweep_id), home=self.store.home)
        status = sweep.status
        # An interrupted sweep (its driver gone) is canceled here, trial by trial: not on
        # the server's event loop.
        await IOLoop.current().run_in_executor(
            None, functools.partial(sweep.cancel, wait=False, actor=self.actor())
        )
        self.write_json({"id": sweep.id, "status": status, "cancel_requested": True}, 202)


class SweepViewSocket(FeedSocket):
    """One viewer of one sweep: the sweep view the notebook's sweep widget draws (header,
    best so far, parallel coordinates, trials), fed by the same ``SweepFeeder``. The viewer
    sends ``{"msg": {"type": "cancel"}}``; it opens a trial's run in a view of its own."""

    @ws_authenticated
    async def get(self, sweep_id: str) -> None:
        try:
            self.sweep = get_sweep(checked_sweep_id(sweep_id), home=Store().home)
            self.sweep.state  # noqa: B018  (a sweep without a readable state cannot be shown)
        except TrainerError as exc:
            raise tornado.web.HTTPError(status_of(exc), str(exc)) from None
        await super().get(sweep_id)

    def make_feeder(self) -> SweepFeeder:
        return SweepFeeder(self.sweep, self._publish)

    def _handle(self, message: Any) -> None:
        if self.feeder is None:
            return
        check_message(message)
        kind = message.get("msg", {}).get("type")
        if kind != "cancel":
            raise ValueError(
                f'a sweep\'s view sends only {{"msg": {{"type": "cancel"}}}}, not {message!r:.100}'
            )
        self._send(json.dumps({"set": {"cancel_state": "requested"}}))
        IOLoop.current().run_in_executor(None, self._cancel)

    def _cancel(self) -> None:
        """Off the server's loop: an interrupted sweep is canceled here, trial by trial."""
        try:
            self.sweep.cancel(wait=False)
        except TrainerError as exc:
            self.loop.add_callback(self._send, json.dumps({"set": {"cancel_state": str(exc)}}))
        feeder = self.feeder
        if feeder is not None:
            feeder.refresh()


def sweep_routes(base: str) -> list[tuple]:
    return [
        (url_path_join(base, "sweeps"), SweepsHandler),
        (url_path_join(base, "sweeps", SWEEP), SweepHandler),
        (url_path_join(base, "sweeps", SWEEP, "cancel"), SweepCancelHandler),
        (url_path_join(base, "sweeps", SWEEP, "view"), SweepViewSocket),
    ]
