"""What a ``Run`` reads of its run: metrics, system samples, logs, a failure's frames,
live stacks, a debugger, and who may act on it."""

from __future__ import annotations

from typing import Any, Literal, cast, overload

from ..core.errors import SpecError, TrainerError
from ..core.records import StateRecord
from ..core.spec import RunSpec
from ..store import Store
from ..store.follow import RunFollower
from ..store.metric_points import AttemptPoint, Point, current_series, points
from ..store.owners import Identity, may_act, owner_name


class RunReaders:
    """The readers of ``Run``: ``store``, ``id``, ``spec`` and ``state`` are the run's."""

    store: Store
    id: str

    @property
    def spec(self) -> RunSpec:
        raise NotImplementedError

    @property
    def state(self) -> StateRecord:
        raise NotImplementedError

    @property
    def owner(self) -> str | None:
        """Who started the run (``alice``; under JupyterHub, the Hub user too), or None if
        that cannot be told."""
        return owner_name(self._owner_record())

    def read_only(self, actor: Identity | None = None) -> str:
        """Why ``actor`` (this process's user) may not cancel the run; "" when it may."""
        record = self._owner_record()
        if may_act(record, actor or Identity.current(), self.store.settings.admin_group):
            return ""
        return (
            f"read-only: this run belongs to {owner_name(record) or 'another user'}; only "
            "its owner and the workspace's admins can cancel it"
        )

    def _owner_record(self) -> dict[str, Any] | None:
        """The owner record of the state; its folder's while the state cannot be read."""
        try:
            return self.store.owner(self.id, self.state)
        except TrainerError:
            return self.store.owner(self.id, {})

    def follower(self) -> RunFollower:
        return RunFollower(self.store, self.id)

    @overload
    def metrics(
        self, rank: int | None = 0, *, all_attempts: Literal[False] = False
    ) -> dict[str, list[Point]]: ...

    @overload
    def metrics(
        self, rank: int | None = 0, *, all_attempts: Literal[True]
    ) -> dict[str, list[AttemptPoint]]: ...

    def metrics(
        self, rank: int | None = 0, *, all_attempts: bool = False
    ) -> dict[str, list[Point]] | dict[str, list[AttemptPoint]]:
        """Each metric's (step, value) points of ``rank``; ``rank=None``: mean across ranks.

        After a restart, the steps a later attempt logged again are its values only: from
        the first step a restarted rank logged on, its earlier attempts' points are left
        out, as TensorBoard leaves out the events a resumed run supersedes. With
        ``all_attempts``, every point each attempt logged, as (step, value, attempt)."""
        follower = self.follower()
        follower.poll()
        if all_attempts:
            return cast(dict[str, list[AttemptPoint]], points(follower.series, rank, attempts=True))
        return cast(dict[str, list[Point]], points(current_series(follower), rank))

    def system(self, rank: int | None = 0) -> dict[str, list[tuple[float | None, float]]]:
        """What the hardware did: each figure's (seconds since the run started, value)
        samples of ``rank`` (``rank=None``: the mean across ranks), as ``metrics`` gives
        its points. The figures are ``cpu_percent``, ``rss_bytes``, ``rss_peak_bytes``,
        ``disk_read_bytes_per_s``, ``disk_write_bytes_per_s``, ``node_mem_available_bytes``,
        ``node_mem_total_bytes``, ``node_net_rx_bytes_per_s``, ``node_net_tx_bytes_per_s``
        and, on NVIDIA GPUs, ``gpu_util_percent``, ``gpu_mem_used_bytes``,
        ``gpu_mem_total_bytes``, ``gpu_process_mem_bytes``, ``gpu_power_watts``,
        ``gpu_power_limit_watts``, ``gpu_temp_c``, ``gpu_sm_clock_mhz``, ``gpu_index``, with
        NVML ``gpu_process_sm_percent`` and with DCGM ``gpu_sm_active_percent`` (docs/system.md);
        a rank samples them every ``system_interval`` seconds of ``submit``
        (``--system-interval``)."""
        follower = self.follower()
        follower.poll()
        origin = float((follower.state or {}).get("created") or 0.0)
        return cast(dict[str, list[Point]], points(follower.system, rank, origin=origin))

    def logs(self, rank: int = 0) -> str:
        """Everything rank ``rank`` printed (stdout and stderr)."""
        text, _ = self.store.read_log(self.id, self.check_rank(rank), 0, max_bytes=None)
        return text

    def frames(self, rank: int | None = None) -> list[dict[str, Any]]:
        """The frames of rank ``rank``'s failure, innermost last, each ``{"file", "line",
        "function", "locals"}`` with every variable's text (a capped ``repr``; secret-looking
        names masked). ``rank=None``: the rank that failed the run. Empty when it did not raise."""
        records = self.store.rank_records(self.id)
        if rank is None:
            failed = self.state.get("failed_rank")
            with_frames = [r for r in sorted(records) if records[r].get("frames")]
            rank = failed if failed in records else next(iter(with_frames), None)
        found = records.get(self.check_rank(rank)) if rank is not None else None
        frames = (found or {}).get("frames")
        return list(frames) if isinstance(frames, list) else []

    def check_rank(self, rank: int) -> int:
        """``rank`` if the run has it (below its world size, or with a trace in the store);
        else ``SpecError`` naming the ranks it has."""
        size = self.spec.launch.world_size
        if type(rank) is int and (0 <= rank < size or rank in self.store.ranks(self.id)):
            return rank
        ranks = "rank 0 only" if size == 1 else f"ranks 0 to {size - 1}"
        raise SpecError(
            f"run {self.id} has no rank {rank!r}: it has {ranks} "
            f"(world size {size}); pick one of those"
        )

    def stacks(self, rank: int | None = None) -> dict[int, str]:
        """The current Python stack of each rank (or of ``rank``), by rank."""
        from .stacks import run_stacks

        return run_stacks(self.store, self.id, rank=rank)

    def collectives(self) -> dict[str, Any] | None:
        """Why the run hangs, from every rank's Flight Recorder dump (docs/hangs.md): ``behind``,
        the ``op`` and ``seq`` the others wait in, ``ranks``, ``mismatches``, ``stragglers``,
        ``stacks`` and the one-line ``verdict``; None when no rank has dumped."""
        from ..supervisor import collectives

        root = self.store.paths(self.id).root
        return collectives.analyse(collectives.read_dumps(root), collectives.read_stacks(root))

    def debug(self, rank: int | None = None, wait: float = 0.0) -> Any:
        """A ``DebugSession`` with the pdb of a rank that waits in one (api/debug.py)."""
        from .debug import attach

        return attach(self.store, self.id, rank, wait)
