"""Validated, frozen descriptions of a run, with a JSON round trip.

One ``RunSpec`` serves every entry point: ``%%train`` flags, ``jupyter-trainer submit``
flags, ``jt.submit(...)`` and (later) the widget form all build the same objects, and
each object validates itself in ``__post_init__`` so a bad value fails before anything
is written or launched.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .errors import InvalidRunId, SpecError
from .redact import redact as redact_value
from .secret_values import recorded_args, secret_entries
from .urls import redact

LAUNCHERS = ("torchrun", "mpirun", "horovod", "python")
BACKENDS = ("nccl", "gloo", "mpi")
MAX_PROCS = 4096
MAX_RESTARTS = 100
ON_STALL = ("warn", "cancel")
DEFAULT_STALL_TIMEOUT = 600.0
DEFAULT_DEBUG_TIMEOUT = 1800.0  # how long a rank that raised under --debug waits to be attached
DEFAULT_SYSTEM_INTERVAL = 5.0  # seconds between samples of a rank's CPU, memory and GPU

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a safe single path segment, else raise ``InvalidRunId``."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise InvalidRunId(
            f"invalid run id {run_id!r}: a run id is 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit; list run ids with `jupyter-trainer runs`"
        )
    return run_id


def is_json_value(value: Any, _depth: int = 0) -> bool:
    """True when ``value`` survives a JSON round trip unchanged (types included)."""
    if _depth > 32:
        return False
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        return all(is_json_value(v, _depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_json_value(v, _depth + 1) for k, v in value.items())
    return False


def parse_param(item: str) -> tuple[str, Any]:
    """Parse one ``KEY=VALUE`` hyperparameter.

    VALUE is read as a Python literal when it is one (``0.1``, ``[64, 32]``, ``True``),
    otherwise it is kept verbatim as a string, so ``-p opt=adam`` and ``-p cmd='; rm -rf ~'``
    both arrive exactly as typed.
    """
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not _IDENTIFIER.fullmatch(key):
        raise SpecError(
            f"invalid parameter {item!r}: write KEY=VALUE where KEY is a Python identifier, "
            "for example -p lr=0.01"
        )
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return key, raw
    if not is_json_value(value):
        raise SpecError(
            f"parameter {key}={raw}: a {type(value).__name__} is not a JSON value; parameters "
            "are numbers, strings, booleans, None, lists or dicts (write a list as [1, 2], "
            "or quote the value to pass it as a string)"
        )
    return key, value


def parse_params(items: list[str] | tuple[str, ...] | None) -> dict[str, Any]:
    """Parse repeated ``-p KEY=VALUE`` flags; the same KEY twice is an error."""
    params: dict[str, Any] = {}
    for item in items or ():
        key, value = parse_param(item)
        if key in params:
            raise SpecError(
                f"the parameter {key!r} is given twice ({item!r} after an earlier "
                f"value); keep the one you mean"
            )
        params[key] = value
    return params


def _check_int(name: str, value: object, low: int, high: int, flag: str) -> None:
    if type(value) is not int or not low <= value <= high:
        raise SpecError(f"{flag} must be a whole number from {low} to {high}, got {value!r}")


@dataclass(frozen=True)
class LaunchSpec:
    """How many processes, started by which launcher, talking over which backend."""

    launcher: str = "torchrun"
    nodes: int = 1
    procs: int = 1
    backend: str | None = None  # None: NCCL where CUDA GPUs are present, else Gloo
    max_restarts: int = 0  # how often every rank is started again after one fails
    hot: bool = False  # fork the ranks from a warm pool (local, ssh, held Slurm)

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise SpecError(
                f"unknown launcher {self.launcher!r}; choose one of {', '.join(LAUNCHERS)}"
            )
        _check_int("nodes", self.nodes, 1, 1024, "--nodes")
        _check_int("procs", self.procs, 1, MAX_PROCS, "--procs")
        _check_int("max_restarts", self.max_restarts, 0, MAX_RESTARTS, "--max-restarts")
        if self.backend is not None and self.backend not in BACKENDS:
            raise SpecError(
                f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)} "
                "(or leave --backend out: NCCL on CUDA GPUs, Gloo on CPU)"
            )
        if self.launcher == "python" and self.world_size != 1:
            raise SpecError(
                "--launcher python runs exactly one process; use --launcher torchrun "
                f"(or mpirun) for {self.world_size} processes"
            )
        if type(self.hot) is not bool:
            raise SpecError(f"hot must be True or False, got {self.hot!r}")
        if self.hot and self.launcher != "torchrun":
            raise SpecError(
                f"--hot forks the ranks torchrun would start; it works with "
                f"--launcher torchrun only (got {self.launcher}): drop --hot"
            )
        if self.hot and self.max_restarts:
            raise SpecError(
                "--hot cannot restart ranks; drop --hot to use --max-restarts "
                "(torchrun restarts them)"
            )

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs

    @property
    def restarts_itself(self) -> bool:
        """Whether the launcher starts the ranks again itself (``--max-restarts``): torchrun
        on one node. On several nodes each torchrun agent counts only its own node's
        failures, so the attempt number (``TORCHELASTIC_RESTART_COUNT``) differs between
        nodes; there, as for the other launchers, the supervisor starts every node again."""
        return self.launcher == "torchrun" and self.nodes == 1


def debug_limit(debug: bool | float) -> float:
    """``debug=`` as given (True, False or a number of seconds) as WatchSpec's ``debug``."""
    if debug is True:
        return DEFAULT_DEBUG_TIMEOUT
    return 0.0 if debug is False else debug


@dataclass(frozen=True)
class WatchSpec:
    """What the supervisor watches for while the ranks run, and what it does then."""

    stall_timeout: float = DEFAULT_STALL_TIMEOUT  # seconds without progress; 0 turns it off
    on_stall: str = "warn"  # "warn": name the rank; "cancel": end the run
    stop_on_nan: tuple[str, ...] = ()  # metrics whose NaN or inf fails the run
    system_interval: float = (
        DEFAULT_SYSTEM_INTERVAL  # 0: no system figures (rankside/observe/system.py)
    )
    autolog: bool = True  # framework calls report to the run (rankside/frameworks/autolog.py)
    debug: float = 0.0  # a rank that raises waits this long for a debugger; 0: it exits

    def __post_init__(self) -> None:
        if type(self.autolog) is not bool:
            raise SpecError(f"autolog must be True or False, got {self.autolog!r}")
        limit = self.debug
        if (
            isinstance(limit, bool)
            or not isinstance(limit, (int, float))
            or not math.isfinite(limit)
            or (limit != 0 and not 1 <= limit <= 7 * 24 * 3600)
        ):
            raise SpecError(
                f"--debug-timeout must be a number of seconds from 1 to 604800 (a week), "
                f"got {limit!r}"
            )
        object.__setattr__(self, "debug", float(limit))
        every = self.system_interval
        if (
            isinstance(every, bool)
            or not isinstance(every, (int, float))
            or not math.isfinite(every)
            or (every != 0 and not 0.5 <= every <= 3600)
        ):
            raise SpecError(
                f"--system-interval must be a number of seconds from 0.5 to 3600 (or 0 to "
                f"sample no CPU, memory and GPU figures), got {every!r}"
            )
        object.__setattr__(self, "system_interval", float(every))
        timeout = self.stall_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout < 0
        ):
            raise SpecError(
                f"--stall-timeout must be a number of seconds, 0 or more (0 turns "
                f"stall detection off), got {timeout!r}"
            )
        if 0 < timeout < 1:
            raise SpecError(
                f"--stall-timeout {timeout!r} is under a second; give at least 1 "
                "(or 0 to turn stall detection off)"
            )
        if self.on_stall not in ON_STALL:
            raise SpecError(
                f"--on-stall must be one of {', '.join(ON_STALL)}, got {self.on_stall!r}"
            )
        given = self.stop_on_nan
        names = (given,) if isinstance(given, str) else tuple(given)
        for name in names:
            if not isinstance(name, str) or not name or not name.isprintable():
                raise SpecError(
                    f"--stop-on-nan takes a metric's name as jt.log gets it (for "
                    f"example --stop-on-nan loss), got {name!r}"
                )
        if len(set(names)) != len(names):
            raise SpecError(f"--stop-on-nan names a metric twice: {list(names)}")
        object.__setattr__(self, "stall_timeout", float(timeout))
        object.__setattr__(self, "stop_on_nan", names)


@dataclass(frozen=True)
class TargetSpec:
    """Where the run goes: a registered target name (``local`` is always there)."""

    name: str = "local"
    price: Mapping[str, Any] = field(default_factory=dict)  # targets/pricing.py

    def __post_init__(self) -> None:
        if not isinstance(self.price, Mapping):
            raise SpecError(f"a target's price must be a mapping, got {self.price!r}")
        if not isinstance(self.name, str) or not _TARGET_NAME.fullmatch(self.name):
            raise SpecError(
                f"invalid target name {self.name!r}: use letters, digits, '.', '_' or '-'; "
                "`%train targets` lists the targets"
            )


@dataclass(frozen=True)
class EnvSpec:
    """Which Python environment runs the ranks. ``name=None`` is the kernel's own."""

    name: str | None = None
    version: str | None = None  # content hash of the definition, filled in when resolved
    python: str | None = None  # interpreter path on the target, filled in when realised
    lock: str | None = None  # key of the lock folder the environment is built from
    variables: Mapping[str, str] = field(default_factory=dict)  # set for every rank
    image: str | None = None  # a container image, for targets that run them
    # What submit found: built or reused, build time, the pre-flight check's result.
    prepared: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is not None and not _TARGET_NAME.fullmatch(str(self.name)):
            raise SpecError(
                f"invalid environment name {self.name!r}: use letters, digits, '.', '_' or '-'"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.variables.items()):
            raise SpecError("environment variables must map names to strings")
        if not is_json_value(dict(self.prepared)):
            raise SpecError("an environment's prepared record must be JSON")
        object.__setattr__(self, "variables", dict(self.variables))
        object.__setattr__(self, "prepared", dict(self.prepared))


@dataclass(frozen=True)
class CodeSpec:
    """The snapshot the ranks execute: its entry script (relative to ``code/``) and hash."""

    entry: str
    hash: str
    origin: str = "cell"  # "cell" or "script"
    args: tuple[str, ...] = ()
    files: int = 0
    bytes: int = 0
    source_dir: str | None = None
    excluded: tuple[str, ...] = ()
    source_files: int = 0  # how many files were taken from source_dir

    def __post_init__(self) -> None:
        if self.origin not in ("cell", "script"):
            raise SpecError(f"code origin must be 'cell' or 'script', got {self.origin!r}")
        if not self.entry or self.entry.startswith("/") or ".." in self.entry.split("/"):
            raise SpecError(
                f"entry script {self.entry!r} must be a relative path inside the snapshot"
            )
        if not all(isinstance(a, str) for a in self.args):
            raise SpecError("script arguments must be strings")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "excluded", tuple(self.excluded))


_DATA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
DATA_KINDS = ("dir", "file")


def validate_data_name(name: object) -> str:
    if not isinstance(name, str) or not _DATA_NAME.fullmatch(name):
        raise SpecError(
            f"invalid data input name {name!r}: write --data NAME=PATH where NAME is "
            "1-64 letters, digits, '_', '.' or '-', starting with a letter or '_' "
            "(the training code reads jt.data['NAME'])"
        )
    return name


@dataclass(frozen=True)
class DataSpec:
    """One data input: its name (``jt.data[name]``), what the user gave (a path or a URL),
    the local file or folder that holds its content (the path itself, or the download
    cache), and that content's size, file count and hash.

    A URL's credentials (a password, a token in its query: ``urls.redact``) never stay in
    ``source``: every spec written, shown, served or copied into a model's lineage holds the
    URL with ``***`` in their place, and so does an older spec read back."""

    name: str
    source: str
    path: str
    kind: str = "dir"
    size: int = 0
    files: int = 0
    hash: str = ""

    def __post_init__(self) -> None:
        validate_data_name(self.name)
        if not isinstance(self.source, str):
            raise SpecError(f"data input {self.name}: its source must be a string")
        object.__setattr__(self, "source", redact(self.source))
        if self.kind not in DATA_KINDS:
            raise SpecError(f"data input {self.name}: kind must be one of {DATA_KINDS}")
        if not self.path.startswith("/"):
            raise SpecError(f"data input {self.name}: its path {self.path!r} must be absolute")
        if not re.fullmatch(r"[0-9a-f]{16,64}", self.hash):
            raise SpecError(f"data input {self.name}: {self.hash!r} is not a content hash")

    @property
    def leaf(self) -> str:
        """The file or folder name the input has in its cache entry."""
        return self.path.rstrip("/").rsplit("/", 1)[-1] or "data"


@dataclass(frozen=True)
class RunSpec:
    """Everything that was asked for a run. Written once to ``spec.json``; never changed."""

    name: str
    code: CodeSpec
    launch: LaunchSpec = field(default_factory=LaunchSpec)
    target: TargetSpec = field(default_factory=TargetSpec)
    env: EnvSpec = field(default_factory=EnvSpec)
    params: Mapping[str, Any] = field(default_factory=dict)
    carried: tuple[str, ...] = ()  # names of notebook objects carried in the snapshot
    origin: Mapping[str, Any] = field(default_factory=dict)  # notebook path, user, host
    watch: WatchSpec = field(default_factory=WatchSpec)
    # Where the run came from: {"rerun_of": ID} or {"resumed_from": ID, "checkpoint": ...}.
    lineage: Mapping[str, Any] = field(default_factory=dict)
    # A sweep's trial: the sweep's id and the trial's number in it.
    sweep: str | None = None
    trial: int | None = None
    data: tuple[DataSpec, ...] = ()  # the inputs, as jt.data finds them
    mlflow: str | None = None  # a tracking URI the run is mirrored to
    # "params.NAME", "variables.NAME" and "args.N" whose values spec.json records redacted:
    # their real values are in the run's owner-only secrets.json (rankside/rank/run_secrets.py)
    secrets: tuple[str, ...] = ()
    # where checkpoints and outputs are uploaded (a storage URL, recorded redacted)
    storage: str | None = None

    def __post_init__(self) -> None:
        validate_name(self.name)
        if self.storage is not None and (
            not isinstance(self.storage, str) or "://" not in self.storage
        ):
            raise SpecError(
                f"a run's storage is a URL such as s3://bucket/runs, not {redact(str(self.storage))!r}"
            )
        if self.storage is not None:  # its credentials are kept aside (inputs/credentials.py)
            object.__setattr__(self, "storage", redact(self.storage))
        data = tuple(
            d if isinstance(d, DataSpec) else DataSpec(**_known(DataSpec, d)) for d in self.data
        )
        names = [d.name for d in data]
        if len(set(names)) != len(names):
            raise SpecError(f"a data input name is given twice: {names}; give each its own")
        object.__setattr__(self, "data", data)
        if self.mlflow is not None and (
            not isinstance(self.mlflow, str) or not self.mlflow or not self.mlflow.isprintable()
        ):
            raise SpecError(
                f"--mlflow takes a tracking URI (http://host:5000, "
                f"sqlite:///mlflow.db, a folder), got {self.mlflow!r}"
            )
        if self.sweep is not None:
            validate_run_id(self.sweep)
        if (self.sweep is None) != (self.trial is None) or (
            self.trial is not None and (type(self.trial) is not int or self.trial < 0)
        ):
            raise SpecError("a trial names both its sweep and its number (a whole number >= 0)")
        if not is_json_value(dict(self.params)):
            bad = sorted(k for k, v in self.params.items() if not is_json_value({k: v}))
            raise SpecError(f"parameters {bad} are not JSON values")
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "carried", tuple(self.carried))
        object.__setattr__(self, "origin", dict(self.origin))
        if not is_json_value(dict(self.lineage)):
            raise SpecError("a run's lineage record must be JSON")
        object.__setattr__(self, "lineage", dict(self.lineage))
        if not all(isinstance(s, str) for s in self.secrets):
            raise SpecError("a run's secrets are the names of its params and variables")
        found = secret_entries(self.params, self.env.variables, self.code.args)
        object.__setattr__(self, "secrets", tuple(sorted({*self.secrets, *found})))

    def to_dict(self) -> dict[str, Any]:
        """The record: every secret param and variable redacted (``secrets`` names them)."""
        data = asdict(self)
        data["params"] = {k: redact_value(v, k) for k, v in self.params.items()}
        data["env"]["variables"] = {k: redact_value(v, k) for k, v in self.env.variables.items()}
        if self.secrets:
            data["secrets"] = list(self.secrets)
        else:  # written only when there are some: earlier specs stay as they were
            del data["secrets"]
        data["code"]["args"] = recorded_args(self.code.args, self.secrets)
        data["code"]["excluded"] = list(self.code.excluded)
        data["carried"] = list(self.carried)
        data["watch"]["stop_on_nan"] = list(self.watch.stop_on_nan)
        data["data"] = [asdict(d) for d in self.data]
        if not self.launch.hot:  # written only when asked for: earlier specs stay as they were
            del data["launch"]["hot"]
        if self.watch.autolog:  # likewise: written only when turned off
            del data["watch"]["autolog"]
        if not self.watch.debug:  # and only when asked for
            del data["watch"]["debug"]
        if self.storage is None:  # and only with storage
            del data["storage"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        try:
            return cls(
                name=data["name"],
                code=CodeSpec(**_known(CodeSpec, data["code"])),
                launch=LaunchSpec(**_known(LaunchSpec, data.get("launch", {}))),
                target=TargetSpec(**_known(TargetSpec, data.get("target", {}))),
                env=EnvSpec(**_known(EnvSpec, data.get("env", {}))),
                params=data.get("params", {}),
                carried=tuple(data.get("carried", ())),
                origin=data.get("origin", {}),
                watch=WatchSpec(**_known(WatchSpec, data.get("watch", {}))),
                lineage=data.get("lineage", {}),
                sweep=data.get("sweep"),
                trial=data.get("trial"),
                data=tuple(data.get("data", ())),
                mlflow=data.get("mlflow"),
                secrets=tuple(data.get("secrets", ())),
                storage=data.get("storage"),
            )
        except (KeyError, TypeError) as exc:
            raise SpecError(f"malformed run spec: {exc}") from exc


def validate_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 100 or not name.isprintable():
        raise SpecError(f"invalid run name {name!r}: use 1-100 printable characters")
    return name


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise SpecError(f"unknown {cls.__name__} fields {sorted(unknown)}")
    return dict(data)
