"""The run monitor in a real JupyterLab, driven by headless Chromium (Playwright).

Each test starts its own ``jupyter lab`` (free port, random token, private settings,
workspace and runtime folders), opens a notebook, runs its cells from the keyboard and
checks the widget as a person would see it. A screenshot of each step is saved under
``$JT_ARTIFACTS`` (default ``out/artifacts``); the README shows copies of them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from conftest import REPO, failed_so_far, leftover, wait_for

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.rankside import procs
from jupyter_trainer.store import HOME_ENV

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
ARTIFACTS = Path(os.environ.get("JT_ARTIFACTS") or REPO / "out" / "artifacts")
TIMEOUT_MS = 90_000
SETTLE_S = 2  # how long a notebook's kernel stays the same before its cells are run
# Errors of the front ends themselves, which they raise with every third-party extension
# disabled. Notebook 7.6's keyboard-shortcuts plugin reads the schema of a plugin that is
# not in the settings registry when the page loads.
KNOWN_ERRORS = re.compile(
    r"^TypeError: Cannot read properties of undefined \(reading 'schema'\)\n"
    r"\s+at \S+/static/notebook/notebook_core\.",
    re.M,
)


class JupyterLab:
    """``jupyter lab`` (or, with ``app="notebook"``, Notebook 7) in folders of its own;
    ``stop`` ends it and every process it started."""

    def __init__(
        self,
        base: Path,
        env: dict[str, str],
        app: str = "jupyterlab",
        theme: str = "JupyterLab Light",
    ) -> None:
        self.base = base
        self.app = app
        self.root = base / "notebooks"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = procs.free_port()
        self.token = secrets.token_hex(16)
        settings = base / "lab-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))
        self.env = {
            **env,
            "JUPYTERLAB_SETTINGS_DIR": str(base / "lab-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "lab-workspaces"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_CONFIG_DIR": str(base / "config"),
        }
        self.log_path = base / "jupyter-lab.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                app,
                "--no-browser",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                f"--ServerApp.token={self.token}",
                "--allow-root",
                f"--ServerApp.root_dir={self.root}",
                "--ServerApp.port_retries=0",
            ],
            env=self.env,
            stdout=open(self.log_path, "w"),
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.app} exited:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(
            f"{self.app} did not answer in {timeout} s:\n{self.log_path.read_text()}"
        )

    @property
    def idle_kernel(self) -> str:
        """What the page shows once the notebook's kernel is connected and idle (Notebook 7
        has no status bar)."""
        if self.app == "jupyterlab":
            return ".jp-StatusBar-TextItem:has-text('| Idle')"
        return ".jp-Toolbar-item:has-text('Kernel status: Idle')"

    def notebook_url(self, name: str) -> str:
        path = f"lab/tree/{name}" if self.app == "jupyterlab" else f"notebooks/{name}"
        return f"{self.url}/{path}?token={self.token}&reset"

    def write_notebook(self, name: str, cells: list[str]) -> str:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        nbformat.write(nb, self.root / name)
        return name

    def kernels(self) -> str:
        """The server's kernels and the state it has for each, or why it could not say."""
        try:
            found = self._kernels()
        except OSError as exc:
            return f"(no answer from /api/kernels: {exc})"
        return ", ".join(f"{k['id'][:8]} {k['execution_state']}" for k in found) or "no kernel"

    def kernel_ids(self) -> set[str] | None:
        """The ids of the server's kernels, or None when it did not answer."""
        try:
            return {k["id"] for k in self._kernels()}
        except OSError:
            return None

    def _kernels(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=10) as r:
            return json.load(r)

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def processes(self) -> list[int]:
        """The server's kernels and whatever they started (they carry its runtime folder)."""
        return procs.pids_with_env("JUPYTER_RUNTIME_DIR", self.env["JUPYTER_RUNTIME_DIR"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # it shuts its kernels down
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.env.get(HOME_ENV):  # the warm rank pools its kernels' runs left, kept for
            pool.stop_pools(self.env[HOME_ENV])  # the next run (JT_POOL_IDLE_S)
        procs.signal_pids(procs.wait_gone(self.processes, timeout=10), signal.SIGKILL)


class Page:
    """A notebook open in headless Chromium, with screenshots of each step."""

    def __init__(self, page, lab: JupyterLab, shots: Path) -> None:
        self.page = page
        self.lab = lab
        self.shots = shots
        self.errors: list[str] = []
        self.failed_requests: list[str] = []
        page.on("pageerror", self._error)
        page.on("requestfailed", self._request_failed)

    def _error(self, exc) -> None:
        text = f"{exc}\n{exc.stack}"
        if KNOWN_ERRORS.search(text):
            return
        if "Failed to fetch" in text:  # which request, and why: the page's error says neither
            text += f"\nrequests that failed so far: {self.failed_requests or 'none'}"
        self.errors.append(text)

    def _request_failed(self, request) -> None:
        self.failed_requests.append(f"{request.method} {request.url}: {request.failure}")

    def open(self, name: str) -> None:
        self.page.goto(self.lab.notebook_url(name))
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=TIMEOUT_MS)
        self.dismiss_popups()

    def dismiss_popups(self) -> None:
        for selector in (
            ".jp-toast-button:has-text('No')",
            ".jp-Notification-Toast-Close",
            "button.jp-toast-dismiss",
        ):
            for button in self.page.locator(selector).all():
                if button.is_visible():
                    button.click()
        self.answer_dialogs()

    def answer_dialogs(self) -> bool:
        """Accept the dialogs Jupyter opens about its own session: under load a notebook can
        lose its kernel for a moment, and Run All then asks to Select Kernel (the default, the
        notebook's own). Each one is screenshotted and named in ``dialogs.txt``."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        answered: list[str] = []
        while True:
            # Each dialog is held by its own element: Jupyter may open the next one (a second
            # Select Kernel when a kernel it had started is gone) as soon as one closes.
            shown = [d for d in self.page.query_selector_all(".jp-Dialog") if d.is_visible()]
            if not shown:
                return bool(answered)
            if len(answered) >= 5:
                raise AssertionError(f"Jupyter kept opening dialogs: {answered}")
            dialog = shown[0]
            header = dialog.query_selector(".jp-Dialog-header")
            title = header.inner_text().strip() if header else "(no title)"
            n = len(list(self.shots.glob("dialog-*.png")))
            dialog.screenshot(path=str(self.shots / f"dialog-{n}.png"))
            with open(self.shots / "dialogs.txt", "a") as out:
                print(title, file=out)
            dialog.query_selector_all(".jp-Dialog-button.jp-mod-accept")[-1].click()
            try:
                dialog.wait_for_element_state("hidden", timeout=30_000)
            except PlaywrightTimeout:
                raise AssertionError(f"the dialog {title!r} stayed open after its accept") from None
            answered.append(title)

    def wait_idle(self, timeout_ms: int = TIMEOUT_MS) -> None:
        """Wait until the notebook's kernel is connected and idle, accepting the dialogs
        Jupyter may open about its session meanwhile (see ``answer_dialogs``). If it is not,
        the error says what the page and the server show for the kernel."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + timeout_ms / 1000
        while (left := deadline - time.monotonic()) > 0:
            try:
                self.page.wait_for_selector(
                    f"{self.lab.idle_kernel}, .jp-Dialog", timeout=left * 1000
                )
            except PlaywrightTimeout:
                break
            if not self.answer_dialogs():
                return
        self.page.screenshot(path=str(self.shots / "kernel-not-idle.png"))
        raise AssertionError(
            f"the kernel was not shown idle in {timeout_ms / 1000:.0f} s; the page shows "
            f"{self.kernel_status()!r}, the server {self.lab.kernels()}; the server's log "
            f"ends:\n{self.lab.log_tail()}"
        )

    def wait_settled(self, timeout_ms: int = TIMEOUT_MS) -> None:
        """``wait_idle``, until the kernel has stayed the same for ``SETTLE_S``: idle on the
        page, no dialog, the same kernels on the server. Under load, Notebook 7 can lose the
        kernel it started as the notebook opened (it dies of an interrupt while starting) and
        start another; its Select Kernel dialog, accepted, then starts a third. A Run All
        begun before that ran its first cells on one kernel and the rest on the next
        ("UsageError: Cell magic `%%train` not found" after ``%load_ext`` had run)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self.wait_idle(int(max(1.0, deadline - time.monotonic()) * 1000))
            before = self.lab.kernel_ids()
            self.page.wait_for_timeout(SETTLE_S * 1000)
            dialog = any(d.is_visible() for d in self.page.query_selector_all(".jp-Dialog"))
            idle = self.page.locator(self.lab.idle_kernel).count() > 0
            if before is not None and not dialog and idle and self.lab.kernel_ids() == before:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the notebook's kernel did not settle in {timeout_ms / 1000:.0f} s; the "
                    f"page shows {self.kernel_status()!r}, the server {self.lab.kernels()}"
                )

    def keep_what_was_shown(self) -> None:
        """At a failure: the whole page as a screenshot, and what its prompts, kernel status
        and the server's kernels were, in ``at-failure.txt``."""
        try:
            self.page.screenshot(path=str(self.shots / "at-failure.png"), full_page=True)
            prompts = self.page.locator(".jp-InputArea-prompt").all_inner_texts()
            (self.shots / "at-failure.txt").write_text(
                f"url: {self.page.url}\nprompts: {prompts}\nkernel: {self.kernel_status()}\n"
                f"server's kernels: {self.lab.kernels()}\nerrors: {self.errors}\n"
            )
        except Exception as exc:  # the test's own failure is what is reported
            print(f"could not keep the page at the failure: {exc!r}")

    def kernel_status(self) -> str:
        """The kernel's status as the page shows it."""
        item = (
            ".jp-StatusBar-TextItem:has-text('|')"
            if self.lab.app == "jupyterlab"
            else ".jp-Toolbar-item:has-text('Kernel status')"
        )
        found = self.page.locator(item).all_inner_texts()
        if found:
            return " ; ".join(text.strip() for text in found)
        bar = " ; ".join(
            t.strip() for t in self.page.locator(".jp-StatusBar-Widget").all_inner_texts()
        )
        tabs = self.page.locator(".lm-TabBar-tab.lm-mod-current").all_inner_texts()
        return f"(no kernel status; status bar {bar or 'absent'!r}, current tabs {tabs})"

    def run_all(self, tries: int = 3) -> None:
        """Run > Run All Cells, once the kernel has settled (``wait_settled``). Under load, Notebook 7
        can show the kernel idle before its session takes requests, and Run All then runs
        nothing: every prompt stays ``[ ]``. Only then is it chosen again, so no cell runs twice."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        self.wait_settled()
        started = ".jp-InputArea-prompt:has-text('[*]'), .jp-InputArea-prompt:has-text('[1]')"
        for attempt in range(tries):
            self.dismiss_popups()
            self.page.click(".lm-MenuBar-item:has-text('Run')")
            self.page.click(".lm-Menu-item[data-command='runmenu:run-all']")
            deadline = time.monotonic() + 15
            while (left := deadline - time.monotonic()) > 0:
                try:
                    self.page.wait_for_selector(f"{started}, .jp-Dialog", timeout=left * 1000)
                except PlaywrightTimeout:
                    break
                if not self.answer_dialogs():
                    return
            prompts = self.page.locator(".jp-InputArea-prompt").all_inner_texts()
            if attempt == tries - 1 or any(text.strip() != "[ ]:" for text in prompts):
                raise AssertionError(f"Run All ran nothing; the prompts read {prompts}")

    def restart_kernel(self) -> None:
        """Kernel > Restart Kernel, confirmed."""
        self.page.click(".lm-MenuBar-item:has-text('Kernel')")
        self.page.click(".lm-Menu-item[data-command='kernelmenu:restart']")
        self.page.wait_for_selector(".jp-Dialog")
        self.answer_dialogs()

    def shot(self, name: str, selector: str = "[data-testid=jt-monitor]") -> Path:
        """Screenshot of the widget. When a run ends, JupyterLab draws the widget's output
        once more (its text/plain is brought up to date), so a view can be replaced
        (detached, or not yet laid out) under the camera: then take the new one."""
        from playwright.sync_api import Error

        self.dismiss_popups()
        path = self.shots / f"{name}.png"
        for attempt in range(3):
            try:
                self.page.locator(selector).last.screenshot(path=str(path), animations="disabled")
                return path
            except Error as exc:
                if not re.search("not attached|not visible", str(exc)) or attempt == 2:
                    raise
                time.sleep(0.5)
        return path

    def attr(self, selector: str, name: str) -> str | None:
        return self.page.locator(selector).first.get_attribute(name)

    def text(self, selector: str) -> str:
        return self.page.locator(selector).first.inner_text()

    def canvas_ink(self, root: str = "") -> list[int]:
        """Pixels drawn (non-transparent) on each chart canvas (under ``root``)."""
        return self.page.eval_on_selector_all(
            f"{root} [data-testid=jt-chart]".strip(),
            """cs => cs.map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; })""",
        )


def _is_local(url: str) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme not in ("http", "https", "ws", "wss") or parts.hostname in (
        "127.0.0.1",
        "localhost",
    )


@contextmanager
def open_browser(
    home: Path,
    name: str,
    app: str,
    theme: str = "JupyterLab Light",
    failed: Callable[[], bool] = lambda: False,
):
    """(server, Page) with the page's artifacts folder; everything is stopped after. A
    request for anything off this machine fails the test: the front end must work offline."""
    from playwright.sync_api import sync_playwright

    base = home.parent / "lab"
    lab = JupyterLab(base, {**os.environ, "JUPYTER_TRAINER_MONITOR": "auto"}, app=app, theme=theme)
    shots = ARTIFACTS / name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    offsite: list[str] = []

    def note_offsite(request) -> None:
        if not _is_local(request.url):
            offsite.append(request.url)

    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(base / "chromium-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 1700},
            )
            try:
                context.set_default_timeout(TIMEOUT_MS)
                context.on("request", note_offsite)
                page = Page(context.pages[0] if context.pages else context.new_page(), lab, shots)
                yield lab, page
                if failed():
                    page.keep_what_was_shown()
                assert not page.errors, f"errors in the page: {page.errors}"
                assert not offsite, f"the page asked for files off this machine: {offsite}"
            finally:
                context.close()
    finally:
        lab.stop()
        shutil.copy(lab.log_path, shots / f"{app}.log")


def failed(request) -> Callable[[], bool]:
    return lambda: failed_so_far(request.node)


@pytest.fixture
def browser(home, request):
    """JupyterLab and a page in headless Chromium."""
    with open_browser(home, request.node.name, "jupyterlab", failed=failed(request)) as opened:
        yield opened


@pytest.fixture(params=["JupyterLab Light", "JupyterLab Dark"], ids=["light", "dark"])
def themed_browser(home, request):
    """(JupyterLab, Page) in the light or the dark theme."""
    with open_browser(
        home, request.node.name, "jupyterlab", theme=request.param, failed=failed(request)
    ) as opened:
        yield (*opened, request.param.split()[-1].lower())


@pytest.fixture
def notebook7(home, request):
    """Notebook 7 and a page in headless Chromium."""
    with open_browser(home, request.node.name, "notebook", failed=failed(request)) as opened:
        yield opened


LIVE_CELL = """%%train --procs 2 --name browser-live
import sys, time
from jupyter_trainer import runtime as jt
total = steps_per_epoch * epochs
for step in range(total):
    loss = 2.0 / (1 + 0.05 * step) + 0.05 * ((step * 7919) % 13) / 13
    jt.log(step=step, loss=loss, accuracy=min(0.99, step / total + 0.1 * jt.rank), lr=lr * 0.995 ** step,
           phase="train")
    jt.progress(step + 1, total)
    print(f"\\x1b[32mINFO\\x1b[0m rank {jt.rank} step {step:4d} loss={loss:.4f}", flush=True)
    if step % 25 == 0:
        print(f"\\x1b[33mWARN\\x1b[0m rank {jt.rank}: step {step} checkpoint skipped", file=sys.stderr, flush=True)
    time.sleep(0.08)
"""


LIVE_PARAMS = {"lr": 0.1, "epochs": 50, "steps_per_epoch": 20}
STALL_STACK = """Process 4242: python -m jupyter_trainer.rankside.boot
Python v3.12.3 (/usr/bin/python3.12)

Thread 4242 (active): "MainThread"
    wait_for_batch (loader.py:88)
    train_step (cell.py:12)
    <module> (cell.py:30)
Thread 4250 (idle): "pin_memory"
    select (selectors.py:415)
"""  # what py-spy dump prints of a rank


def write_state(run, **fields) -> None:
    """Put ``fields`` into the run's state (None takes one away), through the store, as its
    supervisor records a stall, a restart or a NaN."""
    state = run.store.read_state(run.id)
    for key, value in fields.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    run.store.write_state(run.id, state)


def under(root: str, selector: str) -> str:
    """``selector`` (a list of them, comma-separated) inside ``root``."""
    return ", ".join(f"{root} {part.strip()}" for part in selector.split(","))


def check_stall(page: Page, root: str, run, shot, panel_row: str = "") -> None:
    """A stalled rank, a restart and a NaN recorded in the run's state: the view warns with
    the rank, its last step, the time it is stuck (counting) and its stack's top frame,
    lists the attempts and names the NaN; the runs list row (``panel_row``) marks the stall.
    Once the rank makes progress again the warning goes."""
    pw = page.page
    within = lambda selector: under(root, selector)
    assert pw.locator(within("[data-testid=jt-attempt]")).is_hidden()  # no restarts, no attempt
    now = time.time()
    rank1 = {
        "rank": 1,
        "seconds": 30.0,
        "since": now - 42,
        "last_step": 4,
        "host": "node-b",
        "stack": STALL_STACK,
        "waiting": False,
    }
    write_state(
        run,
        stalled=[rank1],
        attempts=[
            {
                "attempt": 0,
                "start": now - 100,
                "end": now - 60,
                "failed_rank": 1,
                "error": "RuntimeError: NCCL watchdog timeout",
            },
            {"attempt": 1, "start": now - 58, "end": None, "failed_rank": None, "error": None},
        ],
        non_finite={"loss": {"rank": 0, "step": 15, "value": "nan", "t": now - 50}},
    )
    banner = within("[data-testid=jt-stall][role=alert]")
    pw.wait_for_selector(f"{banner}:has-text('Rank 1 is stalled')")
    assert_readable(pw, banner)
    said = " ".join(page.text(banner).split())
    assert re.search(
        r"Rank 1: no progress for 4\d s after step 4 on node-b in wait_for_batch "
        r"\(loader\.py:88\)",
        said,
    ), said
    clock = lambda: page.text(within("[data-testid=jt-stall] .jt-stall-for"))
    first = clock()
    wait_for(lambda: clock() != first, 5, what="the stall time to count on")
    pw.click(within("[data-testid=jt-stall] summary"))
    assert "train_step (cell.py:12)" in page.text(within("[data-testid=jt-stall] pre"))
    # a newer stack of the same stall: the stack the reader opened stays open
    write_state(run, stalled=[{**rank1, "stack": STALL_STACK + "    prefetch (loader.py:60)\n"}])
    pw.wait_for_selector(
        within("[data-testid=jt-stall] pre:has-text('prefetch (loader.py:60)')"), state="attached"
    )
    assert pw.locator(within("[data-testid=jt-stall] details")).get_attribute("open") is not None
    assert page.text(within("[data-testid=jt-attempt]")) == "attempt 2"
    attempts = " ".join(page.text(within("[data-testid=jt-attempts]")).split())
    assert re.search(r"1 \S+ 0:40 rank 1 failed: RuntimeError: NCCL watchdog timeout", attempts), (
        attempts
    )
    assert "loss became NaN at step 15 on rank 0" in page.text(
        within("[data-testid=jt-non-finite]")
    )
    if panel_row:
        pw.wait_for_selector(
            f"{panel_row} [data-testid=jt-runs-stalled]:has-text('stalled: rank 1')"
        )
        assert page.text(f"{panel_row} [data-testid=jt-runs-attempt]") == "attempt 2"
        page.shot("panel-stalled", "#jupyter-trainer-runs")
    shot("02b-stalled")
    write_state(run, stalled=None, attempts=None, non_finite=None)
    pw.wait_for_selector(banner, state="hidden")
    assert pw.locator(within("[data-testid=jt-attempt]")).is_hidden()
    if panel_row:
        pw.wait_for_selector(f"{panel_row} [data-testid=jt-runs-stalled]", state="detached")


def check_live_view(page: Page, root: str, run, *, shots: str = "", panel_row: str = "") -> None:
    """What a person sees of a live run, asserted on the run view under ``root``: the
    notebook widget and the Lab view run this same function, as they are one component."""
    pw = page.page
    within = lambda selector: under(root, selector)

    def shot(name: str) -> None:
        page.shot(f"{shots}{name}", root)

    pw.wait_for_selector(within(f"[data-testid=jt-name]:text-is('{run.spec.name}')"))
    assert page.text(within("[data-testid=jt-run-id]")) == run.id
    params = " ".join(page.text(within("[data-testid=jt-params]")).split())
    assert all(f"{k} {v}" in params for k, v in LIVE_PARAMS.items()), params
    assert "target local" in page.text(within("[data-testid=jt-meta]"))
    pw.wait_for_selector(within("[data-testid=jt-status]:text-is('running')"))
    assert page.attr(within("[data-testid=jt-stages] [data-stage=running]"), "class").endswith(
        "jt-stage-active"
    )
    shot("01-running")

    # the progress bar advances, with rate and ETA
    fraction = lambda: float(
        page.attr(within("[data-testid=jt-progress-fill]"), "data-fraction") or 0
    )
    first = wait_for(fraction, 60, what="progress")
    wait_for(lambda: fraction() > first + 0.02, 60, what="the progress bar to advance")
    assert re.search(
        r"\d+ / 1,?000 \(\d+%\) .* steps/s .* ETA",
        page.text(within("[data-testid=jt-progress-text]")),
    )
    shot("02-progress")
    check_stall(page, root, run, shot, panel_row)

    # charts with their chips, legends and stats are drawn and grow
    pw.wait_for_selector(within("[data-testid=jt-chart][data-points]"))
    titles = lambda: pw.locator(within(".jt-chart-title")).all_inner_texts()
    assert titles() == ["loss", "accuracy", "lr"]
    assert [
        c.get_attribute("data-metric") for c in pw.locator(within(".jt-metric-chip")).all()
    ] == ["loss", "accuracy", "lr"]
    # each figure of a chart's header says which rank it is of
    assert re.fullmatch(
        r"ranks 0, 1 · last \S+ · min \S+ \(rank [01]\) · max \S+ \(rank [01]\)",
        " ".join(page.text(within(".jt-chart-stats")).split()),
    )
    # a text metric is not charted: its last value per rank is listed
    pw.wait_for_selector(within("[data-testid=jt-text-metrics] tr[data-metric=phase]"))
    texts = page.text(within("[data-testid=jt-text-metrics]"))
    assert re.search(r"phase \(text, not charted\)\s*rank 0 train\s*rank 1 train", texts), texts
    count = lambda: int(page.attr(within("[data-testid=jt-chart]"), "data-count") or 0)
    before = count()
    ink = page.canvas_ink(root)
    assert len(ink) == 3 and all(n > 500 for n in ink), f"a chart canvas is blank: {ink}"
    wait_for(lambda: count() > before + 20, 60, what="the chart to grow")
    shot("03-charts-growing")
    # hovering a chart reads out its values beside the cursor, inside the chart
    chart = pw.locator(within("[data-testid=jt-chart]")).first
    box = chart.bounding_box()
    pw.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
    tip = pw.locator(within(".jt-chart-tip")).first
    tip.wait_for(state="visible")
    assert re.search(r"step \d+.*rank 0: \S+.*rank 1: \S+", " ".join(tip.inner_text().split())), (
        tip.inner_text()
    )
    card = pw.locator(within(".jt-chart-card")).first.bounding_box()
    where = tip.bounding_box()
    assert card["y"] <= where["y"] <= box["y"] + box["height"] / 2, (card, where)
    assert card["x"] <= where["x"] and where["x"] + where["width"] <= card["x"] + card["width"], (
        card,
        where,
    )
    pw.mouse.move(0, 0)

    # charts against wall time, of the mean across ranks; metrics can be hidden and shown
    pw.click(within("[data-testid=jt-opt-x] button[data-value=time]"))
    pw.click(within("[data-testid=jt-opt-agg] button[data-value=mean]"))
    pw.wait_for_function(
        """root => {
        const cs = [...document.querySelectorAll(root + ' [data-testid=jt-chart]')];
        return cs.length === 3 && cs.every(c => c.dataset.x === 'time' && c.dataset.series === '1'); }""",
        arg=root,
    )
    assert pw.locator(within(".jt-legend-item:has-text('mean of 2 ranks')")).count() == 3
    # A click on a chip's figure whose press and release straddle an update (a person's
    # click takes as long as one; so does Playwright's on a loaded machine) still counts:
    # Chromium fires no click once the element pressed on has left the page.
    lr_chip = within(".jt-metric-chip[data-metric=lr]")
    figure = pw.locator(within(".jt-metric-chip[data-metric=lr] b")).bounding_box()
    pw.mouse.move(figure["x"] + figure["width"] / 2, figure["y"] + figure["height"] / 2)
    pw.mouse.down()
    pressed = page.text(lr_chip)
    wait_for(lambda: page.text(lr_chip) != pressed, 20, what="lr's chip to change while pressed")
    pw.mouse.up()
    wait_for(lambda: titles() == ["loss", "accuracy"], 20, what="lr's chart to be hidden")
    shot("03b-wall-time-mean")
    # a log y axis labels its ticks, even over less than a decade (accuracy, so far)
    pw.click(within("[data-testid=jt-opt-y] button[data-value=log]"))
    ticks = wait_for(
        lambda: [
            c.get_attribute("data-y-ticks") or ""
            for c in pw.locator(within("[data-testid=jt-chart]")).all()
        ],
        10,
        what="log axes",
    )
    assert len(ticks) == 2 and all(len(t.split()) >= 2 for t in ticks), ticks
    pw.click(within("[data-testid=jt-opt-y] button[data-value=linear]"))
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    wait_for(lambda: len(titles()) == 3, 60, what="lr's chart back")
    # two quick clicks, before the feeder has answered the first, leave the chart as it was
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    for _ in range(2):  # two chart updates from the feeder after both clicks
        seen = count()
        wait_for(lambda: count() > seen, 60, what="the charts to be updated")
    # An update built before the server had the second click may still show the first;
    # the ones after it must show the chart again (a lost click would never).
    wait_for(
        lambda: titles() == ["loss", "accuracy", "lr"],
        30,
        what="lr's chart, kept after two quick clicks",
    )
    assert "jt-on" in (page.attr(within(".jt-metric-chip[data-metric=lr]"), "class") or "")

    # log lines appear, in colour, and can be searched and picked by rank
    lines = lambda: pw.locator(within("[data-testid=jt-log-line]"))
    wait_for(lambda: lines().count() > 10, 60, what="log lines")
    assert pw.locator(within("[data-testid=jt-log-line] .jt-fg-2")).count() > 0  # green INFO
    pw.fill(within("[data-testid=jt-log-search]"), "warn")
    wait_for(
        lambda: "of" in page.text(within("[data-testid=jt-log-count]")), 60, what="search results"
    )
    # read at once: lines keep arriving from the live run between two separate reads
    shown = pw.evaluate(
        """sel => [...document.querySelectorAll(sel)].map(
            l => [l.innerText, l.querySelectorAll('mark.jt-match').length])""",
        within("[data-testid=jt-log-line]"),
    )
    assert shown and all("WARN" in line and marks >= 1 for line, marks in shown), shown
    pw.select_option(within("[data-testid=jt-log-rank]"), "1")
    wait_for(
        lambda: all(line.startswith("WARN rank 1") for line in lines().all_inner_texts() or ["x"]),
        20,
        what="rank 1's lines only",
    )
    shot("04-logs-search")
    pw.fill(within("[data-testid=jt-log-search]"), "")
    pw.select_option(within("[data-testid=jt-log-rank]"), "all")

    # Cancel ends the run, with no process left; the finished view keeps no Cancel
    assert not run.done
    pw.click(within("[data-testid=jt-cancel]"))
    wait_for(lambda: run.status == "canceled", 20, what="the run to be canceled")
    wait_for(lambda: leftover(run.id) == [], 10, what="every process of the run to end")
    pw.wait_for_selector(within("[data-testid=jt-status]:text-is('canceled')"))
    assert "Canceled" in page.text(within("[data-testid=jt-banner]"))
    assert pw.locator(within("[data-testid=jt-cancel]")).is_hidden()
    pw.wait_for_selector(within("[data-testid=jt-stages] .jt-stage-end:has-text('canceled')"))
    pw.wait_for_selector(within("[data-testid=jt-outputs]"))
    shot("05-canceled")


def test_live_monitor_progress_charts_logs_and_cancel(browser, home):
    lab, page = browser
    lab.write_notebook(
        "live.ipynb",
        ["%load_ext jupyter_trainer", "lr = 0.1\nepochs = 50\nsteps_per_epoch = 20", LIVE_CELL],
    )
    page.open("live.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-progress-text]")
    # While the ranks start, the view does not tell the user to call jt.progress (the cell
    # does); every text it showed before the first progress is collected here.
    before_progress = page.page.evaluate("""() => new Promise(done => {
        const seen = new Set(), el = () => document.querySelector('[data-testid=jt-progress-text]');
        const tick = setInterval(() => {
            seen.add(el().textContent);
            if (/ \\/ /.test(el().textContent)) { clearInterval(tick); done([...seen]); }
        }, 20);
    })""")
    assert before_progress and not [t for t in before_progress if "call jt.progress" in t], (
        before_progress
    )
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.params == LIVE_PARAMS
    check_live_view(page, "[data-testid=jt-monitor]", run)
    page.page.wait_for_selector(".jp-OutputArea-output:has-text('RunCanceled')")
    assert run.state["reason"] == "canceled from the notebook (Cancel button)"


FORM_CELL = """%%train --form --procs 2 --name from-form
import time
from jupyter_trainer import runtime as jt
for step in range(epochs * 10):
    jt.log(step=step, loss=1.0 / (1 + lr * step), width=float(sum(layers)))
    jt.progress(step + 1, epochs * 10)
    time.sleep(0.05)
print("trained", lr, epochs, layers, optimizer, augment, flush=True)
"""


def test_form_launch_records_the_entered_values(browser, home):
    lab, page = browser
    lab.write_notebook(
        "form.ipynb",
        [
            "%load_ext jupyter_trainer",
            "lr = 0.1\nepochs = 3\nlayers = [64, 32]\noptimizer = 'sgd'\naugment = False",
            FORM_CELL,
        ],
    )
    page.open("form.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-form]")
    assert page.attr("[data-testid=jt-param-lr]", "value") == "0.1"
    assert page.attr("[data-testid=jt-param-layers]", "value") == "[64, 32]"
    page.shot("06-form")
    # a value of the wrong type is caught before anything starts
    page.page.fill("[data-testid=jt-param-epochs]", "4.5")
    assert page.page.locator("[data-testid=jt-launch]").is_disabled()
    assert "epochs must be a whole number" in page.text(".jt-form")
    page.shot("07-form-invalid")
    page.page.fill("[data-testid=jt-param-epochs]", "4")
    page.page.fill("[data-testid=jt-param-lr]", "0.025")
    page.page.fill("[data-testid=jt-param-layers]", "[128, 64, 10]")
    page.page.fill("[data-testid=jt-param-optimizer]", "adam")
    page.page.check("[data-testid=jt-param-augment]")
    page.page.fill("[data-testid=jt-form-procs]", "2")
    assert api.runs(home=home) == []
    page.page.click("[data-testid=jt-launch]")

    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.params == {
        "lr": 0.025,
        "epochs": 4,
        "layers": [128, 64, 10],
        "optimizer": "adam",
        "augment": True,
    }
    assert run.spec.launch.procs == 2 and run.name == "from-form"
    run.wait(timeout=90)
    page.page.wait_for_function(
        "document.querySelector('[data-testid=jt-status]').textContent === 'completed'"
    )
    page.page.wait_for_selector(
        "[data-testid=jt-log-line]:has-text('trained 0.025 4 [128, 64, 10] adam True')"
    )
    assert page.attr("[data-testid=jt-progress-fill]", "data-fraction") == "1"
    page.shot("08-form-became-monitor")
    assert leftover(run.id) == []


def test_a_failed_run_shows_the_failing_rank_and_traceback(browser, home):
    lab, page = browser
    # the Lab view's messages from the server, held while ``release`` says so (set up
    # before the page loads: Playwright routes the sockets of pages loaded after)
    held: list = []
    release = {"now": True}

    def hold(ws) -> None:
        server = ws.connect_to_server()
        server.on_message(
            lambda message: ws.send(message) if release["now"] else held.append((ws, message))
        )

    page.page.route_web_socket("**/jupyter-trainer/api/runs/*/view*", hold)
    lab.write_notebook(
        "fail.ipynb",
        [
            "%load_ext jupyter_trainer",
            """%%train --procs 2 --name diverges
import time
from jupyter_trainer import runtime as jt
def check(loss, step):
    if loss > 4:
        raise FloatingPointError(f"loss diverged to {loss:.2f} at step {step}")
for step in range(60):
    loss = 1.0 + (step * 0.1 if jt.rank == 1 else 0.0)
    jt.log(step=step, loss=loss)
    jt.progress(step + 1, 60)
    print(f"rank {jt.rank} step {step} loss {loss:.2f}", flush=True)
    check(loss, step)
    time.sleep(0.05)
""",
        ],
    )
    page.open("fail.ipynb")
    page.run_all()
    page.page.wait_for_function(
        "(document.querySelector('[data-testid=jt-status]') || {}).textContent === 'failed'"
    )
    banner = page.text("[data-testid=jt-banner]")
    assert "Rank 1 failed first: FloatingPointError: loss diverged to 4.10 at step 31" in banner
    assert 'raise FloatingPointError(f"loss diverged to' in banner
    assert "Cell In [" in banner and "cell.py" not in banner  # the cell's own line numbers
    frames = page.page.eval_on_selector("[data-testid=jt-frames]", "e => e.textContent")
    assert frames.startswith("Variables of each frame of rank 1"), frames
    assert ", in check\n    loss = 4.1" in frames and "\n    step = 31\n" in frames, frames
    page.page.wait_for_selector(".jp-OutputArea-output:has-text('RunFailed')")
    run = api.runs(home=home)[0]
    outputs = page.text("[data-testid=jt-outputs]")  # an ended run lists its outputs/
    assert outputs.startswith("Outputs") and str(run.outputs) in outputs and "(empty)" in outputs
    page.shot("09-failed")
    assert leftover(api.runs(home=home)[0].id) == []
    # The server-fed view of the finished run opens on the end of its log, the traceback,
    # even when it is filled while out of sight (a tab behind another, as JupyterLab
    # restores them): the server's first messages are held until the notebook is in front.
    pw = page.page
    release["now"] = False
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    body = f"#jt-run-{run.id} [data-testid=jt-log-body]"
    pw.wait_for_selector(body)
    pw.click(".lm-TabBar-tab:has-text('fail.ipynb')")
    pw.wait_for_selector(body, state="hidden")
    # (the page's events reach this thread while it waits on the page)
    wait_for(lambda: pw.wait_for_timeout(50) or held, 30, what="the view's first message")
    release["now"] = True
    for ws, message in held:
        ws.send(message)
    pw.wait_for_selector(
        f"{body} [data-testid=jt-log-line]:has-text('FloatingPointError')", state="attached"
    )
    pw.wait_for_timeout(500)  # filled while hidden
    pw.click(f".lm-TabBar-tab[data-id='jt-run-area-{run.id}']")
    pw.wait_for_selector(body)
    assert_log_at_end(pw, body)


def assert_log_at_end(pw, body: str) -> None:
    """The log ``body`` is scrolled to its newest line (and has more than it shows)."""
    at = pw.eval_on_selector(
        body,
        """b => ({top: b.scrollTop, height: b.clientHeight, total: b.scrollHeight,
        last: b.lastElementChild.getBoundingClientRect().bottom <= b.getBoundingClientRect().bottom + 1})""",
    )
    assert at["total"] > at["height"] > 0, at
    assert at["top"] + at["height"] >= at["total"] - 8 and at["last"], (
        f"the log is not at its end: {at}"
    )


def test_a_huge_run_stays_smooth_in_the_browser(browser, home):
    """1,000,000 points per metric and 100 MB of logs: the page draws downsampled series and
    a bounded log tail. How long the page is blocked while the history streams in is
    measured by ``bench/browser_huge_run.py``."""
    from test_widget import huge_run

    lab, page = browser
    run = huge_run(1_000_000, 100)
    lab.write_notebook("huge.ipynb", ["%load_ext jupyter_trainer", f"%train attach {run.id}"])
    page.open("huge.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    page.page.wait_for_function(
        "[...document.querySelectorAll('[data-testid=jt-chart]')].map(c => c.dataset.count).join() === '2000000,2000000'",
        timeout=180_000,
    )
    wait_for(
        lambda: (
            "rank 1 done"
            in " ".join(page.page.locator("[data-testid=jt-log-line]").all_inner_texts()[-2:])
        ),
        30,
        what="the log tail",
    )
    drawn = page.page.eval_on_selector_all(
        "[data-testid=jt-chart]", "cs => cs.map(c => +c.dataset.points)"
    )
    assert all(0 < n <= 2000 for n in drawn), drawn
    assert page.page.locator("[data-testid=jt-log-line]").count() <= 2000
    assert "1,000,000 points × 2 ranks" in page.text(".jt-chart-foot")
    # rank 1's spike (1.02) is the maximum, not rank 0's (1.01)
    assert (
        " ".join(page.text(".jt-chart-card[data-metric=loss] .jt-chart-stats").split())
        == "ranks 0, 1 · last 1e-6 · min 1e-6 (rank 0) · max 1.02 (rank 1)"
    )
    page.shot("10-huge-run")


def test_a_reloaded_page_shows_the_live_widget_again(browser, home, tmp_path):
    lab, page = browser
    stop = tmp_path / "stop"  # the run goes on until the reloaded page has been checked
    lab.write_notebook(
        "reload.ipynb",
        [
            "%load_ext jupyter_trainer",
            f"stop_file = {str(stop)!r}",
            """%%train --no-wait --procs 2 --name reload
import os, time
from jupyter_trainer import runtime as jt
total = 3000
for step in range(total):
    jt.log(step=step, loss=1.0 / (step + 1))
    jt.progress(step + 1, total)
    print("reload step", step, flush=True)
    if os.path.exists(stop_file):
        break
    time.sleep(0.06)
jt.progress(total, total)
""",
        ],
    )
    page.open("reload.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-log-line]")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    page.page.keyboard.press("Control+s")
    page.page.wait_for_selector(".jp-mod-dirty", state="detached")
    page.page.reload()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    assert page.text("[data-testid=jt-run-id]") == run.id and not run.done
    fraction = lambda: float(page.attr("[data-testid=jt-progress-fill]", "data-fraction") or 0)
    before = fraction()
    wait_for(lambda: fraction() > before, 30, what="progress after the reload")
    wait_for(
        lambda: (
            page.page.locator("[data-testid=jt-log-line]:has-text('reload step 0')").count() == 2
        ),
        30,
        what="the log history after the reload",
    )
    page.shot("11-after-reload")
    stop.touch()
    run.wait(timeout=60)
    page.page.wait_for_function(
        "document.querySelector('[data-testid=jt-status]').textContent === 'completed'"
    )
    assert page.attr("[data-testid=jt-progress-fill]", "data-fraction") == "1"
    assert leftover(run.id) == []


def test_notebook7_shows_the_same_live_monitor(notebook7, home):
    server, page = notebook7
    server.write_notebook(
        "nb7.ipynb",
        [
            "%load_ext jupyter_trainer",
            "lr = 0.1\nepochs = 50\nsteps_per_epoch = 20",
            LIVE_CELL.replace("browser-live", "notebook7"),
        ],
    )
    page.open("nb7.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.name == "notebook7"
    check_live_view(page, "[data-testid=jt-monitor]", run, shots="12-notebook7-")


LONG_CELL = """%%train --no-wait --name long
import time
from jupyter_trainer import runtime as jt
for step in range(3000):
    jt.progress(step + 1, 3000)
    print("long step", step, flush=True)
    time.sleep(0.05)
"""


def start_a_long_run(lab, page: Page, name: str):
    """A notebook whose %%train --no-wait cell is running; its run."""
    lab.write_notebook(name, ["%load_ext jupyter_trainer", LONG_CELL])
    page.open(name)
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-status]:text-is('running')")
    return api.get_run(page.text("[data-testid=jt-run-id]"))


# Every 50 ms from now on: the widget's status, elapsed clock and Cancel, with the time.
WATCH_WIDGET = """() => {
    window.__jtSeen = [];
    // when a dialog's accept button is clicked: the moment a person confirms a restart
    document.addEventListener('click', e => {
        if (e.target.closest('.jp-Dialog-button.jp-mod-accept')) window.__jtAccepted = performance.now();
    }, true);
    const q = s => document.querySelector(s);
    window.__jtWatch = setInterval(() => window.__jtSeen.push([performance.now(),
        q('[data-testid=jt-status]').textContent, q('[data-testid=jt-elapsed]').textContent,
        q('[data-testid=jt-cancel]').disabled]), 50);
}"""


def clock_seconds(text: str) -> int:
    """``1:02`` or ``1:02:03`` in seconds."""
    seconds = 0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def test_after_a_kernel_restart_the_old_widget_says_its_kernel_is_gone(browser, home):
    lab, page = browser
    run = start_a_long_run(lab, page, "restart.ipynb")
    pw = page.page
    wait_for(
        lambda: clock_seconds(page.text("[data-testid=jt-elapsed]")) >= 7,
        30,
        what="the clock past the feeder's first state refresh",
    )
    pw.evaluate(WATCH_WIDGET)
    pw.click(".lm-MenuBar-item:has-text('Kernel')")
    pw.click(".lm-Menu-item[data-command='kernelmenu:restart']")
    pw.wait_for_selector(".jp-Dialog")
    page.answer_dialogs()
    # the moment the restart was confirmed, in the page's clock: not before the dialog's
    # screenshot, whose time on a loaded machine is the test's, not the widget's
    restarted = pw.evaluate("window.__jtAccepted")
    assert isinstance(restarted, (int, float)), "no click on the restart dialog's accept was seen"
    # the run goes on without the kernel; its old widget no longer pretends to follow it
    pw.wait_for_selector("[data-testid=jt-status]:text-is('running?')", timeout=30_000)
    pw.wait_for_timeout(2500)
    seen = pw.evaluate("clearInterval(window.__jtWatch) || window.__jtSeen")
    gone = next(t for t, status, _, _ in seen if status == "running?")
    assert gone - restarted <= 2000, f"the widget noticed after {gone - restarted:.0f} ms"
    assert all(disabled for t, _, _, disabled in seen if t >= gone)
    clocks = [clock_seconds(clock) for _, _, clock, _ in seen]
    assert clocks == sorted(clocks), f"the clock went back: {clocks}"
    assert len({clock for t, _, clock, _ in seen if t >= gone + 100}) == 1, "the clock ran on"
    notice = page.text("[data-testid=jt-notice]")
    assert "kernel that showed this run is gone" in notice and f"%train attach {run.id}" in notice
    assert "ETA" not in page.text("[data-testid=jt-progress-text]")
    assert not page.errors, page.errors  # no "Cannot send" in the page
    page.shot("13-kernel-restarted")
    assert run.status == "running"
    run.cancel()
    assert leftover(run.id) == []


@pytest.fixture(params=["jupyterlab", "notebook"], ids=["lab", "notebook7"])
def any_front_end(home, request):
    """JupyterLab, then Notebook 7, each with a page in headless Chromium."""
    with open_browser(home, request.node.name, request.param, failed=failed(request)) as opened:
        yield opened


def widths(pw, view: str) -> dict:
    """The width of the output that holds ``view`` and of the view itself, in pixels."""
    return pw.eval_on_selector(
        view,
        """el => {
        const child = el.closest('.jp-OutputArea-child');
        const prompt = child.querySelector('.jp-OutputArea-prompt');
        return {area: child.getBoundingClientRect().width - (prompt ? prompt.getBoundingClientRect().width : 0),
                view: el.getBoundingClientRect().width}; }""",
    )


def test_after_a_restart_and_a_reload_the_output_shows_the_run_from_the_server(any_front_end, home):
    lab, page = any_front_end
    run = start_a_long_run(lab, page, "reloaded.ipynb")
    pw = page.page
    widget = widths(pw, "[data-testid=jt-monitor]")
    pw.keyboard.press("Control+s")
    pw.wait_for_selector(".jp-mod-dirty", state="detached")
    page.restart_kernel()
    page.wait_idle()
    pw.reload()
    # not "Error displaying widget: model not found": the run view, fed by the server
    view = "[data-testid=jt-monitor][data-source=server]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('running')", timeout=TIMEOUT_MS)
    assert "model not found" not in pw.inner_text(".jp-OutputArea")
    assert page.text("[data-testid=jt-run-id]") == run.id
    # it fills the output area as the widget did, not the width of its text
    server = widths(pw, view)
    assert server["view"] >= server["area"] - 2 and server["view"] >= widget["view"] - 2, (
        server,
        widget,
    )
    progress = pw.eval_on_selector(
        f"{view} [data-testid=jt-progress-text]", "el => el.scrollWidth <= el.clientWidth"
    )
    assert progress, "the progress line is cut off"
    fraction = lambda: float(page.attr("[data-testid=jt-progress-fill]", "data-fraction") or 0)
    before = wait_for(fraction, 30, what="progress")
    wait_for(lambda: fraction() > before, 30, what="progress from the server")
    wait_for(
        lambda: page.page.locator("[data-testid=jt-log-line]:has-text('long step')").count() > 3,
        30,
        what="log lines from the server",
    )
    page.shot("14-reloaded-after-restart")
    pw.click("[data-testid=jt-cancel]")
    wait_for(
        lambda: run.status == "canceled", 20, what="the run to be canceled from the server view"
    )
    pw.wait_for_selector("[data-testid=jt-status]:text-is('canceled')")
    assert leftover(run.id) == []


THEMED_CELL = """%%train --procs 2 --name themed
from jupyter_trainer import runtime as jt
for step in range(60):
    loss = float("nan") if step == 15 else 2.0 / (1 + 0.1 * step)
    jt.log(step=step, loss=loss, accuracy=step / 60 + 0.05 * jt.rank, phase="train")
    jt.progress(step + 1, 60)
    print(f"\\x1b[32mINFO\\x1b[0m rank {jt.rank} step {step}", flush=True)
"""


def luminance(css: str) -> float:
    """Of a computed colour: ``rgb(r, g, b)``, or ``color(srgb r g b)`` (what color-mix gives)."""
    numbers = [float(v) for v in re.findall(r"[\d.]+", css)[:3]]
    r, g, b = (v * 255 for v in numbers) if css.startswith("color(srgb") else numbers
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def assert_readable(pw, selector: str) -> None:
    """The text of ``selector`` stands out from its own background."""
    back, fore = pw.eval_on_selector(
        selector, "el => [getComputedStyle(el).backgroundColor, getComputedStyle(el).color]"
    )
    assert abs(luminance(back) - luminance(fore)) > 0.45, (selector, back, fore)


def test_the_run_view_follows_the_theme_in_the_widget_and_the_lab_view(themed_browser, home):
    lab, page, theme = themed_browser
    lab.write_notebook("themed.ipynb", ["%load_ext jupyter_trainer", "lr = 0.1", THEMED_CELL])
    page.open("themed.ipynb")
    page.run_all()
    pw = page.page
    widget = ".jp-OutputArea [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{widget} [data-testid=jt-status]:text-is('completed')")
    pw.wait_for_selector(f"{widget} [data-testid=jt-chart][data-points]")
    run = api.get_run(page.text(f"{widget} [data-testid=jt-run-id]"))
    shots = {}

    def check(where: str, root: str) -> None:
        background = pw.eval_on_selector(root, "el => getComputedStyle(el).backgroundColor")
        color = pw.eval_on_selector(
            f"{root} [data-testid=jt-name]", "el => getComputedStyle(el).color"
        )
        dark = theme == "dark"
        assert (luminance(background) < 0.3) == dark and (luminance(color) > 0.6) == dark, (
            where,
            theme,
            background,
            color,
        )
        assert pw.text_content(f"{root} [data-testid=jt-status]") == "completed"
        # NaN at step 15 on both ranks: marked on the chart and counted, never dropped
        loss = f"{root} .jt-chart-card[data-metric=loss]"
        assert pw.get_attribute(f"{loss} [data-testid=jt-chart]", "data-non-finite") == "2"
        assert "2 NaN/inf" in page.text(f"{loss} .jt-chart-foot")
        assert re.search(
            r"min 0\.28\d* \(rank 0\) · max 2 \(rank 0\)", page.text(f"{loss} .jt-chart-stats")
        )
        if where == "lab":  # opened after the NaN was recorded; the widget had ended before
            nan = f"{root} [data-testid=jt-non-finite]"
            assert page.text(nan) == "⚠ loss became NaN at step 15 on rank 0"
            assert_readable(pw, nan)
        shots[where] = page.shot(f"run-view-{theme}-{where}", root)

    check("widget", widget)
    first = {"rank": 0, "step": 15, "value": "nan", "t": run.state["created"]}
    write_state(run, non_finite={"loss": first})  # as the supervisor records it
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    view = f"#jt-run-{run.id} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-chart][data-points]")
    check("lab", view)
    if os.environ.get("JT_UPDATE_SCREENSHOTS"):  # refresh the docs' pictures on purpose only
        for path in shots.values():
            shutil.copy(path, REPO / "docs" / "screenshots" / path.name)
    assert leftover(run.id) == []
