"""JupyterLab and Notebook 7 in headless Chromium (Playwright), for the browser tests.

Each test starts its own ``jupyter lab`` (``lab_server.JupyterLab``: free port, random
token, private settings, workspace and runtime folders), opens a notebook, runs its cells
from the keyboard and checks the widget as a person would see it. A screenshot of each step
is saved under ``$JT_ARTIFACTS`` (default ``out/artifacts``); the README shows copies of
them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, failed_so_far

from support.lab_server import JupyterLab

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium as the tests start it: unable to watch the network interfaces that other tests add
# and remove (see chromium_offline_netlink.py)
OFFLINE_NETLINK = Path(__file__).with_name("chromium_offline_netlink.py")
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


def chromium_launcher(folder: Path) -> str:
    """An executable in ``folder`` that starts CHROMIUM through chromium_offline_netlink.py,
    for Playwright's ``executable_path``."""
    script = folder / "chromium"
    argv = [sys.executable, str(OFFLINE_NETLINK), CHROMIUM]
    script.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
    script.chmod(0o755)
    return str(script)


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
                executable_path=chromium_launcher(base),
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


def opened(home: Path, request, app: str, theme: str = "JupyterLab Light"):
    """``open_browser`` for the test that asks, named after it; yields (server, Page)."""
    with open_browser(home, request.node.name, app, theme, failed(request)) as both:
        yield both


@pytest.fixture
def browser(home, request):
    """JupyterLab and a page in headless Chromium."""
    yield from opened(home, request, "jupyterlab")


@pytest.fixture(params=["JupyterLab Light", "JupyterLab Dark"], ids=["light", "dark"])
def themed_browser(home, request):
    """(JupyterLab, Page) in the light or the dark theme."""
    for both in opened(home, request, "jupyterlab", request.param):
        yield (*both, request.param.split()[-1].lower())


@pytest.fixture
def notebook7(home, request):
    """Notebook 7 and a page in headless Chromium."""
    yield from opened(home, request, "notebook")


@pytest.fixture(params=["jupyterlab", "notebook"], ids=["lab", "notebook7"])
def any_front_end(home, request):
    """JupyterLab, then Notebook 7, each with a page in headless Chromium."""
    yield from opened(home, request, request.param)
