"""The v1 names that cannot map are refused when called, by name, before anything starts;
``jupyter-trainer azureml check`` finds them, with their lines, in notebooks and scripts;
conda specifications, compute targets and HyperDrive expressions map as documented."""

from __future__ import annotations

import inspect
import json
import math
import re
import subprocess
import sys

import pytest
from conftest import REPO

from jupyter_trainer.azureml import names
from jupyter_trainer.azureml.check import REFUSED, check_path, check_source, judge
from jupyter_trainer.azureml.core import (
    ComputeTarget,
    CondaDependencies,
    Dataset,
    Environment,
    Experiment,
    ScriptRunConfig,
    Workspace,
)
from jupyter_trainer.azureml.core.compute import AmlCompute
from jupyter_trainer.azureml.core.environment import V1Note
from jupyter_trainer.azureml.errors import (
    ComputeTargetException,
    NotSupported,
    UserErrorException,
)
from jupyter_trainer.azureml.train.dnn import PyTorch
from jupyter_trainer.azureml.train.hyperdrive import (
    GridParameterSampling,
    RandomParameterSampling,
    choice,
    lognormal,
    loguniform,
    qlognormal,
    qloguniform,
    qnormal,
    randint,
    uniform,
)

V1 = REPO / "tests" / "support" / "azureml_v1"


def resolve(name: str):
    """The object of the package a v1 name (``Type.attribute``) stands for, and the instance
    a method is called on."""
    import importlib

    from jupyter_trainer.azureml import check

    first, *rest = name.split(".")
    if first in check._CLASSES:
        module, cls = check._CLASSES[first]
        obj = getattr(importlib.import_module(f"jupyter_trainer.azureml.{module}"), cls)
    else:
        obj = next(
            getattr(importlib.import_module(f"jupyter_trainer.azureml.{m}"), first)
            for m in names.MODULES.values()
            if hasattr(importlib.import_module(f"jupyter_trainer.azureml.{m}"), first)
        )
    owner = None
    for part in rest:
        owner, obj = obj, getattr(obj, part)
    if isinstance(owner, type) and inspect.isfunction(inspect.getattr_static(owner, rest[-1])):
        make = INSTANCES.get(owner.__name__, lambda: owner.__new__(owner))
        return obj.__get__(make()), name  # an instance method: on an instance of its class
    return obj, name


# How a test gets an instance whose methods it calls (others: a bare instance suffices)
INSTANCES = {
    "Workspace": Workspace,
    "ComputeTarget": lambda: ComputeTarget(Workspace(), "local"),
    "FileDataset": lambda: Dataset.File.from_files(str(V1 / "data")),
}


REFUSED_CALLS = sorted(n for n in names.REFUSED if n != "Dataset.Tabular")


@pytest.mark.parametrize("name", REFUSED_CALLS)
def test_every_refused_name_raises_not_supported_naming_itself(name, home):
    obj, _ = resolve(name)
    try:
        required = [
            p
            for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        required = []
    with pytest.raises(NotSupported) as info:
        obj(*[None] * len(required))
    short = name.split(".")[-1]
    assert short in str(info.value), str(info.value)
    assert "not supported by jupyter_trainer: " in str(info.value)
    assert judge(name)[0] == REFUSED


def test_tabular_datasets_are_refused_with_the_file_dataset_way():
    with pytest.raises(NotSupported, match=r"Dataset.Tabular.from_delimited_files.*pandas"):
        Dataset.Tabular.from_delimited_files(path="x.csv")


def test_every_name_that_works_differently_exists():
    missing = [n for n in names.DIFFERS if judge(n)[0] == REFUSED]
    assert not missing


def test_a_missing_compute_target_is_v1s_exception_with_the_command_that_adds_it(home):
    ws = Workspace()
    with pytest.raises(
        ComputeTargetException, match=r"jupyter-trainer target add gpu-cluster --kind slurm"
    ):
        ComputeTarget(workspace=ws, name="gpu-cluster")
    with pytest.raises(
        NotSupported, match=r"AmlCompute.provisioning_configuration.*targets.toml.*target add"
    ):
        AmlCompute.provisioning_configuration(vm_size="STANDARD_NC6", max_nodes=4)
    assert ComputeTarget(ws, "local").type == "local"
    assert not (home / "runs").exists()


def test_a_conda_specification_maps_to_pypi_and_says_what_it_leaves_out():
    env = Environment.from_conda_specification("pt", str(V1 / "conda_dependencies.yml"))
    with pytest.warns(V1Note) as notes:
        definition = env.definition()
    said = str(notes[0].message)
    assert "cudatoolkit=11.8" in said and "azureml-defaults" in said
    assert definition.pip == ("numpy", "six==1.16.0") and definition.inherit is True
    deps = CondaDependencies.create(
        conda_packages=["pytorch::pytorch=2.3", "py-opencv", "scikit-learn>=1.4"],
        pip_packages=["tqdm"],
    )
    assert deps.pip_requirements() == (
        ["torch==2.3.*", "opencv-python", "scikit-learn>=1.4", "tqdm"],
        [],
    )


def test_a_package_only_conda_has_is_refused_by_name():
    env = Environment("native")
    env.python.conda_dependencies = CondaDependencies.create(conda_packages=["libgcc-ng", "numpy"])
    with pytest.raises(NotSupported, match=r"the conda package libgcc-ng .*only conda provides it"):
        env.definition()
    env.python.conda_dependencies = CondaDependencies.create(
        conda_packages=["openmpi=4.1", "hdf5", "numpy"]
    )
    with pytest.raises(NotSupported, match=r"packages openmpi=4.1, hdf5 .*only conda provides"):
        env.definition()


def test_condas_switches_between_torch_builds_are_left_out_with_a_note():
    env = Environment("gpu")
    env.python.conda_dependencies = CondaDependencies.create(
        conda_packages=["pytorch=2.1", "pytorch-cuda=12.1", "cpuonly"]
    )
    with pytest.warns(V1Note, match=r"pytorch-cuda=12.1 \(conda's switch.*cpuonly \(conda's"):
        definition = env.definition()
    assert definition is not None and definition.pip == ("torch==2.1.*",)


def test_another_python_builds_an_environment_of_its_own():
    env = Environment("old")
    env.python.conda_dependencies = CondaDependencies.create(
        python_version="3.9", pip_packages=["six"]
    )
    definition = env.definition()
    assert (definition.python, definition.inherit, definition.pip) == ("3.9", False, ("six",))


def test_curated_environments_and_user_managed_ones(home):
    """A curated PyTorch environment is the kernel's own, with a note naming its torch; a
    clone of it adds packages on top of the kernel's; a TensorFlow one is refused."""
    import torch

    note = rf"'AzureML-PyTorch-1.6-GPU'.*kernel's own.*{re.escape(torch.__version__)}, not the 1.6"
    with pytest.warns(V1Note, match=note):
        curated = Environment.get(Workspace(), "AzureML-PyTorch-1.6-GPU")
    assert curated.definition() is None
    mine = curated.clone("birds-env")
    mine.python.conda_dependencies.add_pip_package("six==1.16.0")
    definition = mine.definition()
    assert definition is not None and definition.name == "birds-env"
    assert definition.inherit and definition.pip == ("six==1.16.0",)
    with pytest.raises(NotSupported, match=r"AzureML-TensorFlow-2.3-GPU.*runs PyTorch"):
        Environment.get(Workspace(), "AzureML-TensorFlow-2.3-GPU")
    with pytest.raises(NotSupported, match="named like a curated one"):
        Environment("AzureML-Mine").definition()
    env = Environment("mine")
    env.python.user_managed_dependencies = True
    assert env.definition() is None  # the kernel's environment, as it is


def test_a_base_image_is_refused_on_a_target_without_containers_before_anything_exists(home):
    env = Environment.from_docker_image("img", "nvcr.io/nvidia/pytorch:24.05-py3")
    config = ScriptRunConfig(
        source_directory=str(V1 / "proj"),
        script="train.py",
        arguments=["--data-dir", Dataset.File.from_files(str(V1 / "data")).as_mount()],
        environment=env,
    )
    with pytest.raises(
        UserErrorException,
        match=r"docker.base_image = 'nvcr.io/nvidia/pytorch:24.05-py3', but compute target 'local'",
    ):
        Experiment(Workspace(), "image").submit(config)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_azure_storage_and_credentialed_datastores_are_refused():
    with pytest.raises(
        NotSupported, match=r"wasbs://c@a.blob.core.windows.net/x.*presigned https://"
    ):
        Dataset.File.from_files("wasbs://c@a.blob.core.windows.net/x")
    with pytest.raises(NotSupported, match=r"vm_size"):
        PyTorch(source_directory=str(V1 / "proj"), entry_script="train.py", vm_size="STANDARD_NC6")


def test_hyperdrive_expressions_become_sweep_expressions():
    assert loguniform(-6, -1) == f"loguniform({math.exp(-6)!r}, {math.exp(-1)!r})"
    assert randint(4) == "randint(0, 4)" and choice(range(3)) == "choice(0, 1, 2)"
    assert qloguniform(0, 3, 5) == f"qloguniform(1.0, {math.exp(3)!r}, 5)"
    assert (lognormal(0, 1), qnormal(10, 2, 1), qlognormal(1, 0.5, 0.5)) == (
        "lognormal(0, 1)",
        "qnormal(10, 2, 1)",
        "qlognormal(1, 0.5, 0.5)",
    )
    sampling = RandomParameterSampling(
        {"lr": qloguniform(-6, -1, 0.001), "width": qnormal(64, 8, 8)}
    )
    assert set(sampling.space()) == {"lr", "width"}  # each is a sweep expression here
    sampling = RandomParameterSampling(
        {"--learning-rate": uniform(0.01, 0.1), "batch": choice(16, 32)}
    )
    assert sampling.space() == {"learning_rate": "uniform(0.01, 0.1)", "batch": "choice(16, 32)"}
    assert sampling.arguments() == [
        "--learning-rate",
        "${{params.learning_rate}}",
        "--batch",
        "${{params.batch}}",
    ]
    with pytest.raises(ValueError, match="grid sampling takes choice"):
        GridParameterSampling({"lr": uniform(0, 1)})


def test_check_names_each_refused_call_of_a_deployment_notebook_with_its_line():
    findings = check_path(V1 / "notebooks" / "deploy.ipynb")
    refused = {
        (f.path.split("(")[-1].rstrip(")"), f.line, f.name)
        for f in findings
        if f.verdict == REFUSED
    }
    assert refused == {  # cells numbered as the notebook shows them, markdown ones included
        ("cell 3", 2, "AmlCompute.provisioning_configuration()"),
        ("cell 3", 3, "ComputeTarget.create()"),
        ("cell 4", 2, "InferenceConfig()"),
        ("cell 4", 3, "AciWebservice.deploy_configuration()"),
        ("cell 4", 4, "Model.deploy()"),
    }, refused


def test_check_of_the_training_notebooks_and_script_refuses_nothing():
    findings = check_path(V1)
    refused = [f for f in findings if f.verdict == REFUSED and "deploy.ipynb" not in f.path]
    assert not refused, refused
    script = {(f.line, f.name) for f in findings if f.path == "proj/train.py"}
    lines = (V1 / "proj" / "train.py").read_text().splitlines()
    log = next(i for i, line in enumerate(lines, 1) if 'run.log("loss"' in line)
    tag = next(i for i, line in enumerate(lines, 1) if "run.tag(" in line)
    assert (log, "ScriptRun.log()") in script and (tag, "ScriptRun.tag()") in script
    differs = {f.name for f in findings if f.verdict == "works differently"}
    assert {
        "ScriptRun.log_image()",
        "Environment.from_conda_specification()",
        "RunDetails()",
    } <= differs


def test_check_reads_keywords_and_unknown_methods():
    source = (
        "from azureml.core import ScriptRunConfig, Workspace\n"
        "ws = Workspace.from_config()\n"
        "cfg = ScriptRunConfig('.', 'train.py', resume_from=None, max_run_duration_seconds=60)\n"
        "ws.write_config()\n"
        "ws.set_connection('x')\n"
    )
    found = {(f.line, f.name, f.verdict) for f in check_source(source, "nb.py")}
    assert (3, "ScriptRunConfig(resume_from=...)", REFUSED) in found
    assert (3, "ScriptRunConfig(max_run_duration_seconds=...)", "works differently") in found
    assert (4, "Workspace.write_config()", "works") in found
    assert (5, "Workspace.set_connection()", REFUSED) in found


def test_the_check_command_exits_1_on_a_refusal_and_prints_json():
    cmd = [sys.executable, "-m", "jupyter_trainer", "azureml", "check"]
    done = subprocess.run(
        [*cmd, str(V1 / "notebooks" / "deploy.ipynb")], capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr
    assert "Model.deploy()" in done.stdout and " refused (docs/azureml.md)" in done.stdout
    done = subprocess.run([*cmd, "--json", str(V1 / "proj")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["summary"]["refused"] == 0 and data["summary"]["works"] > 5
    done = subprocess.run([*cmd, str(V1 / "missing.ipynb")], capture_output=True, text=True)
    assert done.returncode != 0 and "missing.ipynb does not exist" in done.stderr


def test_check_refuses_the_notebooks_names_in_a_script_and_follows_chained_calls():
    script = (
        "from azureml.core import Run, Dataset\n"
        "run = Run.get_context()\n"
        "ds = Dataset.get_by_name(run.experiment.workspace, 'birds')\n"
        "run.log('acc', 1)\n"
    )
    found = {(f.line, f.name, f.verdict) for f in check_source(script, "train.py")}
    assert (3, "Dataset.get_by_name()", REFUSED) in found
    assert (4, "ScriptRun.log()", "works") in found
    notebook = (
        "from azureml.core import Experiment, Workspace\n"
        "run = Experiment(Workspace(), 'x').submit(cfg)\n"
        "run.wait_for_completion()\n"
        "Experiment(Workspace(), 'y').submit(cfg).log('acc', 1)\n"
    )
    found = {(f.line, f.name, f.verdict) for f in check_source(notebook, "nb.py")}
    assert (2, "Experiment.submit()", "works") in found
    assert (3, "Run.wait_for_completion()", "works differently") in found
    assert (4, "Run.log()", REFUSED) in found


def test_pip_requirements_and_a_base_image_become_the_environments(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# pinned\nsix==1.16.0\ntomli  # for configs\n\n")
    env = Environment.from_pip_requirements("reqs", str(requirements))
    env.environment_variables = {"OMP_NUM_THREADS": "2"}
    definition = env.definition()
    assert (definition.name, definition.pip, definition.inherit) == (
        "reqs",
        ("six==1.16.0", "tomli"),
        True,
    )
    assert definition.env == {"OMP_NUM_THREADS": "2"}
    image = Environment.from_docker_image("img", "nvcr.io/nvidia/pytorch:24.05-py3").definition()
    assert image.image == "nvcr.io/nvidia/pytorch:24.05-py3"  # run by Slurm (pyxis) and Kubernetes


def test_the_v1_package_never_shadows_azureml_in_the_kernel():
    """Only a rank's path has the script side: the notebook's ``import azureml`` finds the real
    package or nothing, and the package's own import paths stay under jupyter_trainer."""
    import importlib.util

    import jupyter_trainer.azureml.core
    import jupyter_trainer.azureml.train.hyperdrive  # noqa: F401

    spec = importlib.util.find_spec("azureml")
    assert spec is None or "jupyter_trainer" not in str(
        spec.origin or spec.submodule_search_locations
    )
    assert not any("azureml_v1" in p for p in sys.path)


def test_download_file_never_follows_a_link_out_of_the_run(home, tmp_path):
    from jupyter_trainer.api import runs as api
    from jupyter_trainer.azureml.core.run import Run

    inner = api.submit("print('x')", launcher="python", name="links", wait=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's")
    (inner.outputs / "away").symlink_to(tmp_path, target_is_directory=True)
    (inner.outputs / "kept.txt").write_text("the run's")
    run = Run(Experiment(Workspace(), "links"), inner.id, inner)
    with pytest.raises(UserErrorException, match="no file 'outputs/away/secret.txt'"):
        run.download_file("outputs/away/secret.txt", str(tmp_path / "got.txt"))
    assert not (tmp_path / "got.txt").exists()
    run.download_file("outputs/kept.txt", str(tmp_path / "kept.txt"))
    assert (tmp_path / "kept.txt").read_text() == "the run's"


@pytest.mark.parametrize(
    "config, launch",
    [
        ("MpiConfiguration()", ("mpirun", 2, 3)),
        ("Mpi()", ("mpirun", 2, 3)),
        ("MpiConfiguration(process_count_per_node=4)", ("mpirun", 2, 4)),
        ("PyTorchConfiguration()", ("torchrun", 2, 3)),
        ("PyTorchConfiguration(process_count=8, node_count=2)", ("torchrun", 2, 4)),
        ("Nccl()", ("torchrun", 2, 3)),
    ],
)
def test_an_estimators_counts_reach_a_configuration_left_at_its_defaults(config, launch):
    """``PyTorch(node_count=2, process_count_per_node=3, distributed_training=
    MpiConfiguration())``, as v1's docs wrote it, runs 2 nodes of 3 processes: a configuration
    left at its defaults takes the estimator's counts, one that sets them keeps its own."""
    from jupyter_trainer.azureml.core.runconfig import MpiConfiguration, PyTorchConfiguration
    from jupyter_trainer.azureml.train.dnn import Mpi, Nccl

    made = eval(  # the configuration as a v1 notebook writes it
        config,
        {
            "Mpi": Mpi,
            "Nccl": Nccl,
            "MpiConfiguration": MpiConfiguration,
            "PyTorchConfiguration": PyTorchConfiguration,
        },
    )
    estimator = PyTorch(
        source_directory=str(V1 / "proj"),
        entry_script="train.py",
        node_count=2,
        process_count_per_node=3,
        distributed_training=made,
    )
    job = estimator.submission(Workspace())
    assert (job["launcher"], job["nodes"], job["procs"]) == launch


def test_check_of_a_script_keeps_its_imports_and_names_what_a_run_lacks():
    """A training script is never edited: its ``azureml.core`` imports are judged against
    the script side a run has, its model registrations work differently, and a notebook
    module imported in a script is refused by name with its line."""
    source = (
        "from azureml.core.run import Run\n"
        "from azureml.core import Run as R, ScriptRunConfig\n"
        "from azureml.core.model import Model\n"
        "from azureml.train.hyperdrive import choice\n"
        "run = Run.get_context()\n"
        "run.register_model(model_name='m', model_path='outputs/m.pt')\n"
        "Model.register(workspace=run.experiment.workspace, model_path='m.pt', model_name='n')\n"
    )
    found = {(f.line, f.name): f for f in check_source(source, "train.py")}
    for line, name in ((1, "Run"), (2, "Run"), (3, "Model")):
        module = {1: "azureml.core.run", 2: "azureml.core", 3: "azureml.core.model"}[line]
        finding = found[(line, f"from {module} import {name}")]
        assert finding.verdict == "works" and "unchanged" in finding.note
    for line, name in (
        (2, "azureml.core import ScriptRunConfig"),
        (4, "azureml.train.hyperdrive import choice"),
    ):
        assert found[(line, f"from {name}")].verdict == REFUSED
    assert found[(6, "ScriptRun.register_model()")].verdict == "works differently"
    assert "once the run has completed" in found[(7, "Model.register()")].note


def test_check_follows_a_hyperdrive_config_given_to_submit_by_keyword():
    source = (
        "from azureml.core import Experiment, Workspace\n"
        "from azureml.train.hyperdrive import HyperDriveConfig\n"
        "hd = HyperDriveConfig(run_config=None, hyperparameter_sampling=None,\n"
        "    primary_metric_name='a', primary_metric_goal=None, max_total_runs=2)\n"
        "run = Experiment(Workspace.from_config(), 'x').submit(config=hd)\n"
        "best = run.get_best_run_by_primary_metric()\n"
    )
    found = {f.name: f.verdict for f in check_source(source, "nb.py")}
    assert found["HyperDriveRun.get_best_run_by_primary_metric()"] == "works"


def test_a_run_configurations_environment_variables_reach_the_environment(home):
    config = ScriptRunConfig(source_directory=str(V1 / "proj"), script="train.py")
    config.run_config.environment_variables = {"BIRDS_ROOT": "/data/birds", "SEED": 7}
    environment = config.submission(Workspace())["environment"]
    definition = environment.definition()
    assert definition is not None and definition.inherit
    assert dict(definition.env) == {"BIRDS_ROOT": "/data/birds", "SEED": "7"}
    assert config.run_config.environment.environment_variables == {}  # the config's own is kept


def test_a_truncation_policy_that_excludes_finished_trials_says_it_is_not_honoured():
    from jupyter_trainer.azureml.train.hyperdrive import TruncationSelectionPolicy

    with pytest.warns(V1Note, match="finished ones included"):
        policy = TruncationSelectionPolicy(20, exclude_finished_jobs=True)
    assert policy.prune() == "truncation:20"


def test_check_refuses_a_call_for_the_value_written_in_it():
    source = (
        "from azureml.core import Dataset, Environment, Workspace\n"
        "ws = Workspace.from_config()\n"
        "ds = Dataset.File.from_files(path=['wasbs://c@acct.blob.core.windows.net/x?sig=s'])\n"
        "web = Dataset.File.from_files('https://example.org/mnist/train.gz')\n"
        "tf = Environment.get(ws, 'AzureML-TensorFlow-2.3-GPU')\n"
        "pt = Environment.get(workspace=ws, name='AzureML-PyTorch-1.6-GPU')\n"
    )
    verdicts = {f.line: (f.verdict, f.note) for f in check_source(source, "nb.py")}
    assert verdicts[3][0] == REFUSED and "sig=s" not in verdicts[3][1]
    assert "credentials stay out of runs" in verdicts[3][1]
    assert verdicts[4][0] != REFUSED and verdicts[6][0] != REFUSED
    assert verdicts[5] == (
        REFUSED,
        "the curated environment 'AzureML-TensorFlow-2.3-GPU': this project runs PyTorch",
    )
