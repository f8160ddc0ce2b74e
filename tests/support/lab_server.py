"""``jupyter lab`` or Notebook 7 started for one test: a free port, a random token, and its
own settings, workspace, runtime and config folders; stopping it ends every process it and
its kernels started, and the warm rank pools their runs left."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat

from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import HOME_ENV


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
                # Notebook 7 can lose the kernel it starts as a notebook opens (wait_settled):
                # its server logs every request, so the one that ended it is named
                *(["--ServerApp.log_level=DEBUG"] if app == "notebook" else []),
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
