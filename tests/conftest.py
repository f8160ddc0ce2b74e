"""Shared fixtures: an isolated run store per test, and a check that no process is left."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from jupyter_trainer.core.errors import TrainerError
from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import HOME_ENV, Store
from jupyter_trainer.store.records import read_supervisor
from jupyter_trainer.supervisor import starter

# The ssh hosts' fixtures, one set for the whole session: a session fixture that test modules
# import is made once for each of them instead.
pytest_plugins = ["support.ssh_hosts"]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh run store; every run started by the test is checked for leftovers at the end."""
    path = tmp_path / "jt-home"
    monkeypatch.setenv(HOME_ENV, str(path))
    yield path
    starter.release_spare()  # the supervisor kept waiting for this test's next run
    store = Store(path)
    leaks = {}
    for sweep_dir in (path / "sweeps").glob("*") if (path / "sweeps").exists() else ():
        state_file = sweep_dir / "state.json"
        driver = (
            (json.loads(state_file.read_text()).get("driver") or {}) if state_file.exists() else {}
        )
        if driver.get("host") != socket.gethostname():
            continue
        deadline = time.monotonic() + 15
        while (
            procs.is_alive(driver.get("pid"), driver.get("start_ticks"))
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        if procs.is_alive(driver.get("pid"), driver.get("start_ticks")):
            leaks[sweep_dir.name] = [procs.describe(driver["pid"])]
            os.kill(driver["pid"], 9)
    for run_dir in (path / "runs").glob("*") if (path / "runs").exists() else ():
        if run_dir.name.startswith("."):
            continue
        deadline = time.monotonic() + 15
        left = leftover_pids(run_dir.name)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = leftover_pids(run_dir.name)
        if left:
            leaks[run_dir.name] = [procs.describe(p) for p in left]
            procs.signal_pids(left, 9)
        try:
            state = store.read_state(run_dir.name)
        except TrainerError:  # a test damaged the run's record: its supervisor's own record
            state = {"status": "unknown", "supervisor": read_supervisor(store.paths(run_dir.name))}
        sup = state.get("supervisor") or {}
        if state["status"] not in ("completed", "failed", "canceled", "lost") and procs.is_alive(
            sup.get("pid"), sup.get("start_ticks")
        ):
            os.kill(sup["pid"], 15)
    pool.stop_pools(path)  # the warm rank pools --hot runs started in this store
    for pools in tmp_path.rglob(pool.records.POOLS_DIR):  # and on an ssh target's nodes
        if pools.is_dir():
            pool.stop_pools(pools.parent)
    assert not leaks, f"processes left behind: {leaks}"


@pytest.fixture(params=["hot", "torchrun"])
def launch_mode(request, monkeypatch) -> str:
    """Run the test twice: ranks forked by the warm pool (the default) and ranks started by
    torchrun (``$JT_HOT=0``), so that any difference between the two fails a test. Check
    each run with ``launched_by``: a mode that did not take effect fails too."""
    monkeypatch.setenv("JT_HOT", "1" if request.param == "hot" else "0")
    return request.param


def launched_by(run) -> str:
    """``hot`` when the pool forked the run's ranks, ``torchrun`` when torchrun started them."""
    launcher = run.state.get("launcher") or {}
    if (launcher.get("hot") or {}).get("used"):
        return "hot"
    assert "torch.distributed.run" in launcher.get("argv", []), launcher
    return "torchrun"


@pytest.fixture
def ip(home):
    """A real IPython shell with the extension loaded; its namespace is reset afterwards."""
    from IPython.testing import globalipapp

    globalipapp.start_ipython()  # once per process; later calls return None
    shell = globalipapp.get_ipython()
    shell.run_cell("%load_ext jupyter_trainer", store_history=True)
    yield shell
    shell.reset(new_session=False)


@pytest.fixture
def store(home) -> Store:
    return Store(home)


def leftover_pids(run_id: str) -> list[int]:
    """The pids ``leftover`` describes."""
    run_dir = Path(os.environ[HOME_ENV], "runs", run_id) if os.environ.get(HOME_ENV) else None
    found = set(pool.leftover_pids(run_id, run_dir))
    for node_dir in node_run_dirs(run_dir) if run_dir is not None else ():
        found.update(pool.records.recorded_pids(node_dir))
    return sorted(found)


def leftover(run_id: str) -> list[str]:
    """The live processes of a run of the current store, ranks forked by a pool included
    (here, or on the nodes of an ssh target, which share this machine's processes)."""
    return [procs.describe(p) for p in leftover_pids(run_id)]


def node_run_dirs(run_dir: Path) -> list[str]:
    """The run folders on the nodes of a multi-node run, from its state."""
    try:
        state = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return []
    return [
        n["run_dir"]
        for n in (state.get("launcher") or {}).get("nodes") or ()
        if isinstance(n, dict) and n.get("run_dir")
    ]


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# Each rank writes an output in a nested folder, a metric and a checkpoint.
RANKS_WRITE = """
import os
from jupyter_trainer import runtime as jt
os.makedirs("outputs/deep", exist_ok=True)
with open(f"outputs/deep/rank-{jt.rank}.txt", "w") as f:
    f.write("x")
jt.log(step=0, loss=1.0)
jt.save_checkpoint({"step": 0}, step=0)
"""


def check_shared_modes(root: Path) -> int:
    """Every file and folder under ``root`` (a run of a shared workspace) is readable by the
    group and by nobody else, and writable by its owner only; how many were checked."""
    import stat

    checked = 0
    for path in [root, *root.rglob("*")]:
        try:
            found = os.lstat(path)
        except FileNotFoundError:  # removed meanwhile: a supervisor ending drops its spares
            continue
        if stat.S_ISLNK(found.st_mode):
            continue
        mode = stat.S_IMODE(found.st_mode)
        assert not mode & 0o022, f"{path} is writable by others than its owner ({oct(mode)})"
        assert not mode & 0o004, f"{path} is readable outside the group ({oct(mode)})"
        assert mode & 0o040, f"{path} is not readable by the group ({oct(mode)})"
        checked += 1
    return checked


def live_state(run, ranks: int, timeout: float) -> dict:
    """The run's state once it is running and every one of its ``ranks`` has logged an
    event (the events reached the local store while the run still goes)."""
    return wait_for(
        lambda: (
            run.status == "running"
            and all(run.store.read_events(run.id, r)[0] for r in range(ranks))
            and run.state
        ),
        timeout=timeout,
        what=f"events of all {ranks} ranks while running",
    )


@pytest.fixture(scope="session")
def pg_server(worker_id):
    """A PostgreSQL server per xdist worker, for the whole session (``pg_server.py``)."""
    from support.pg_server import PgServer, available
    from support.slurm_cluster import worker_index

    problem = available()
    if problem:
        pytest.fail(f"the shared workspace's tests need PostgreSQL: {problem}")
    server = PgServer(worker_index(worker_id))
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """The URL of a new, empty database on the session's server."""
    return pg_server.new_database()


@pytest.fixture
def team(pg_url):
    """Three members and an admin sharing a workspace on PostgreSQL, as real Unix users
    (``workspace_team.py``); the users, groups and their processes are removed after."""
    from support.workspace_team import make_team

    yield from make_team(pg_url)


@pytest.fixture
def bare_team(pg_url):
    """A ``team`` whose administrator has not yet run the set-up's last step (``doctor
    --fix``, which makes the top folders)."""
    from support.workspace_team import make_team

    yield from make_team(pg_url, set_up=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def index_home(request, home, monkeypatch) -> Path:
    """``home`` with its index on each back end in turn: SQLite, then PostgreSQL."""
    if request.param == "postgresql":
        monkeypatch.setenv("JUPYTER_TRAINER_INDEX", request.getfixturevalue("pg_url"))
    return home


@pytest.fixture(scope="session")
def slurm(tmp_path_factory, worker_id):
    """A single-host Slurm (slurmctld + slurmd) per xdist worker, for the whole session."""
    from support.slurm_cluster import start_cluster, worker_index

    cluster = start_cluster(tmp_path_factory.mktemp("slurm"), worker_index(worker_id))
    yield cluster
    cluster.stop()


# A value each remote target's environment carries to the ranks: it must arrive as it is.
HOSTILE = 'x\'; $(touch /tmp/pwned) `id` "y"'


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups from the markers
def pytest_collection_modifyitems(config, items):
    """Whichever test first needs its worker's Ray cluster starts it, which on a loaded machine
    takes minutes: every test that uses the cluster has ``START_WITHIN`` beyond the suite's
    timeout, unless it names its own. They are one ``xdist_group``: under ``--dist
    loadgroup`` (``scripts/test.sh``) one worker runs them all, one after another, on one
    cluster, which it ends after the last of them."""
    from support.ray_cluster import START_WITHIN

    budget = float(config.getini("timeout")) + START_WITHIN
    for item in items:
        if "ray_cluster" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("ray-cluster"))
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(budget))


# This process's cluster, its tests not yet run, and why it could not be started, if so.
_ray: dict = {"cluster": None, "left": 0, "failed": None}


def pytest_collection_finish(session):
    _ray["left"] = sum("ray_cluster" in item.fixturenames for item in session.items)


@pytest.fixture(scope="session")
def _ray_session():
    """Ends the worker's Ray cluster at the end of the session if its last test has not."""
    yield _ray
    _stop_ray()


def _stop_ray() -> None:
    cluster, _ray["cluster"] = _ray["cluster"], None
    if cluster is not None:
        assert cluster.stop() == [], "processes of the Ray cluster were left"


@pytest.fixture
def ray_cluster(_ray_session, worker_id):
    """A two-node Ray cluster of this xdist worker, started by the first test that uses it
    and ended after the last (of those the worker collected), or at the end of the session.
    A start that failed is not tried again: the worker's later tests that use the cluster
    fail at once with its reason. Defined here, once: a fixture imported into several test
    modules is a fixture of each of them, and a second cluster of the same worker would
    start on the ports its first still holds."""
    from support.ray_cluster import start_cluster

    if _ray_session["failed"]:  # not again for every test: each try takes minutes
        pytest.fail(f"this worker's Ray cluster failed to start: {_ray_session['failed']}")
    if _ray_session["cluster"] is None:
        index = 0 if worker_id == "master" else int(worker_id.lstrip("gw"))
        try:
            _ray_session["cluster"] = start_cluster(index)
        except Exception as exc:
            _ray_session["failed"] = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise
    yield _ray_session["cluster"]
    _ray_session["left"] -= 1
    if _ray_session["left"] <= 0:
        _stop_ray()


@pytest.fixture
def rc(ray_cluster, home, tmp_path, monkeypatch):
    """A target "rc" on the test cluster; every driver (checks, supervisors) stays on
    loopback, as the cluster does."""
    from support.ray_cluster import CONNECT_TIMEOUT

    from jupyter_trainer.targets.registry import add_target

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    add_target(
        "rc",
        "ray",
        home=home,
        address=ray_cluster.address,
        connect_timeout=CONNECT_TIMEOUT,
        workdir=str(tmp_path / "nodes"),
        env={"GLOO_SOCKET_IFNAME": "lo", "JT_TEST_VAR": HOSTILE},
    )
    return ray_cluster


@pytest.fixture
def cluster(slurm, home, monkeypatch):
    """A target named 'cluster' on the test's Slurm; the queue is empty before and after."""
    from support.slurm_cluster import as_target

    with as_target(slurm, home, monkeypatch) as cluster:
        yield cluster


_session: dict = {}  # the session's config, for the hooks that are given only a report


def pytest_configure(config):
    _session["config"] = config
    # A suite started as a background job of a script (`bash .ci/run &`) inherits Ctrl-C
    # ignored, and under nohup the hangup too, and so would every process its tests start:
    # the tests that send SIGINT or SIGHUP to a command expect it to act as at a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_runtest_logreport(report):
    """A failure or error is shown the moment it is reported, not only in the summary at the
    end: a suite that its time limit kills still says what failed, and why. Once, by the
    process that prints the progress (xdist's controller, not its workers)."""
    config = _session.get("config")
    if not report.failed or config is None or hasattr(config, "workerinput"):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    kind = "FAILED" if report.when == "call" else f"ERROR at {report.when} of"
    reporter.write_line("")
    reporter.write_line(f"{kind} {report.nodeid}:")
    reporter.write_line(report.longreprtext[-4000:])


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """An xdist worker collects its garbage once, after the session's fixtures are torn down,
    and freezes what is left. After the worker reports that it has finished, pytest's own
    cleanup collects five more times, and execnet interrupts a worker that is still busy 5 s
    after the controller says goodbye (a SIGINT: a KeyboardInterrupt in whatever it was
    doing). On a loaded machine five full collections of a worker that imported torch, Ray
    and transformers take longer than that; with the survivors frozen they take no time, and
    what the one collection here finds is still reported."""
    if hasattr(session.config, "workerinput"):
        gc.collect()
        gc.freeze()


REPORTS = pytest.StashKey[dict]()  # each phase's report of a test, for its fixtures' teardown


def failed_so_far(node) -> bool:
    """Whether the test's setup or call failed, as its fixtures' teardown sees it."""
    return any(r.failed for r in node.stash.get(REPORTS, {}).values())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[REPORTS] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails shows, for each run of its store, the run's status and the tail of
    its launcher log (and the traceback of a ``RunFailed``), so that a failure seen once in a
    long suite, a timeout included, can be understood from its report alone."""
    from jupyter_trainer.core.errors import RunFailed

    report = yield
    item.stash[REPORTS][call.when] = report
    if not report.failed or call.when == "teardown":
        return report
    failed = call.excinfo.value if call.excinfo is not None else None
    if isinstance(failed, RunFailed) and failed.traceback:
        report.sections.append(("run traceback", failed.traceback))
    home = os.environ.get(HOME_ENV)
    runs = sorted(Path(home, "runs").glob("*/state.json")) if home else []
    for state_file in runs[-4:]:
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            state = {}
        log = state_file.parent / "logs" / "launcher.log"
        tail = log.read_text(errors="replace")[-4000:] if log.is_file() else "(no launcher.log)"
        title = f"run {state_file.parent.name}: {state.get('status')} {state.get('error') or ''}"
        report.sections.append((title.strip(), tail))
    return report
