"""The time the suite gives a test that may have to start a shared cluster first, and the
group that keeps the tests of a cluster on one worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.ray_cluster import START_WITHIN

TESTS = Path(__file__).resolve().parents[1]
PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        if "ray_cluster" in item.fixturenames:
            marker = item.get_closest_marker("timeout")
            group = item.get_closest_marker("xdist_group")
            print(
                "budget",
                item.module.__name__,
                marker.args[0] if marker else None,
                group.args[0] if group else None,
            )
"""


def test_every_test_on_the_ray_cluster_has_the_time_to_start_it(tmp_path):
    """Whichever test comes first on a worker starts the cluster, in any module that uses it."""
    (tmp_path / "budget_plugin.py").write_text(PLUGIN)
    modules = (
        "targets/ray/test_ray.py",
        "targets/test_dry_run.py",
        "frontends/azureml/test_azureml.py",
    )
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
    assert {name for name, _, _ in found} == {
        m.removesuffix(".py").replace("/", ".") for m in modules
    }
    assert min(float(budget) for _, budget, _ in found) >= 300 + START_WITHIN
    assert {group for _, _, group in found} == {"ray-cluster"}  # one worker, one cluster


GROUPED = """
import time
import pytest

@pytest.mark.parametrize("n", range(4))
@pytest.mark.xdist_group("one-cluster")
def test_grouped(n, tmp_path_factory):
    time.sleep(0.3)

@pytest.mark.parametrize("n", range(4))
def test_free(n):
    time.sleep(0.3)
"""


def test_the_installed_xdist_keeps_a_group_on_one_worker(tmp_path):
    """``--dist loadgroup`` works with the installed pytest (pytest 9 broke it for xdist 3.8:
    each worker would start a cluster of its own)."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"]
        + ["-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    ran_on = re.findall(r"^\[(gw\d)\].* PASSED .*::test_grouped", done.stdout, re.M)
    assert len(ran_on) == 4 and len(set(ran_on)) == 1, done.stdout[-2000:]
