"""The time the suite gives a test that may have to start a shared cluster first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ray_cluster import START_WITHIN

TESTS = Path(__file__).parent
PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        if "ray_cluster" in item.fixturenames:
            marker = item.get_closest_marker("timeout")
            print("budget", item.module.__name__, marker.args[0] if marker else None)
"""


def test_every_test_on_the_ray_cluster_has_the_time_to_start_it(tmp_path):
    """Whichever test comes first on a worker starts the cluster, in any module that uses it."""
    (tmp_path / "budget_plugin.py").write_text(PLUGIN)
    modules = ("test_ray.py", "test_dry_run.py", "test_azureml.py")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "budget_plugin",
            "-p",
            "no:cacheprovider",
            *(str(TESTS / m) for m in modules),
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=240,
        cwd=TESTS.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("budget ")]
    assert {name for name, _ in found} == {m.removesuffix(".py") for m in modules}
    assert min(float(budget) for _, budget in found) >= 300 + START_WITHIN
