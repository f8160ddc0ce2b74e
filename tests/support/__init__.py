"""What the tests share and start, imported as ``support.NAME`` (``tests/`` is on the path).

Servers (``lab_server``, ``pg_server``, ``http_servers``, ``server_rest``), clusters
(``slurm_cluster``, ``ray_cluster``, the fake Kubernetes API in ``kube_fake/``), ssh hosts
(``ssh_hosts``, a pytest plugin of the suite, and ``ssh_netns``), browsers (``browser_page``,
``browser_views``, ``chromium_offline_netlink``), kernels (``kernel_client``), workspaces of
real Unix users (``workspace_team``, ``store_fleet``), runs made for a test (``made_runs``,
``huge_run``, ``workloads``, ``hf_trainer``), the command line (``jt_cli``), the daemons'
end and the fixed ports (``daemons``, ``port_blocks``), and the data the tests compare or
run: ``golden/`` (launcher commands and manifests), ``azureml_v1/`` (Azure ML SDK v1
projects and notebooks) and ``fake_nvml.c``.
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
GOLDEN = SUPPORT / "golden"
AZUREML_V1 = SUPPORT / "azureml_v1"
