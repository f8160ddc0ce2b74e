"""Every Azure ML SDK v1 name this package answers for, and how: the table behind
``jupyter-trainer azureml check`` and docs/azureml.md.

A name is ``module:Name`` for what a v1 program imports, ``Type.attribute`` for what it calls
on a v1 object. Whether a name exists at all is read from this package's own modules and
classes (``check.py``); this table adds what it does differently (``DIFFERS``) and what is
refused (``REFUSED``), each with one line that says what to do.
``tests/frontends/azureml/test_azureml_check.py`` calls every refused name and sees it raise
``NotSupported``.
"""

from __future__ import annotations

# Azure plugins of other packages that v1's samples import: nothing here provides them
PLUGINS = {
    "mlflow.azureml": "azureml-mlflow's plugin for Azure workspaces, not installed here and "
    "with no counterpart: drop the import; a run's metrics reach an MLflow server with "
    "--mlflow URI (docs/mlflow.md)",
}

# v1 module -> this package's module (the same path under jupyter_trainer.azureml)
MODULES = {
    "azureml.core": "core",
    "azureml.core.run": "core.run",
    "azureml.core.runconfig": "core.runconfig",
    "azureml.core.compute": "core.compute",
    "azureml.core.compute_target": "core.compute_target",
    "azureml.core.conda_dependencies": "core.conda_dependencies",
    "azureml.core.environment": "core.environment",
    "azureml.core.dataset": "core.dataset",
    "azureml.core.model": "core.model",
    "azureml.core.workspace": "core.workspace",
    "azureml.core.experiment": "core.experiment",
    "azureml.core.script_run_config": "core.script_run_config",
    "azureml.train": "train",
    "azureml.train.dnn": "train.dnn",
    "azureml.train.estimator": "train.estimator",
    "azureml.train.hyperdrive": "train.hyperdrive",
    "azureml.train.hyperdrive.parameter_expressions": "train.hyperdrive.parameter_expressions",
    "azureml.train.hyperdrive.policy": "train.hyperdrive.policy",
    "azureml.train.hyperdrive.sampling": "train.hyperdrive.sampling",
    "azureml.train.hyperdrive.runconfig": "train.hyperdrive.runconfig",
    "azureml.widgets": "widgets",
    "azureml.data": "data",
    "azureml.data.file_dataset": "data.file_dataset",
    "azureml.data.dataset_consumption_config": "data.dataset_consumption_config",
    "azureml.data.datapath": "data.datapath",
    "azureml.data.data_reference": "data.data_reference",
    "azureml.core.datastore": "core.datastore",
    "azureml.core.authentication": "core.authentication",
    "azureml.core.webservice": "core.webservice",
    "azureml.train.hyperdrive.run": "train.hyperdrive.run",
    "azureml.exceptions": "exceptions",
    "azureml.telemetry": "telemetry",
}

# What a call gives, for the calls whose result a program keeps and uses: the type of the
# result ("Run" is a submitted run in the notebook; "ScriptRun" is Run.get_context()).
RETURNS = {
    "Workspace": "Workspace",
    "Workspace.from_config": "Workspace",
    "Workspace.get": "Workspace",
    "Experiment": "Experiment",
    "Experiment.submit": "Run",
    "Run.get_context": "ScriptRun",
    "ComputeTarget": "ComputeTarget",
    "ComputeTarget.create": "ComputeTarget",
    "Model": "Model",
    "Run.register_model": "Model",
    "Environment": "Environment",
    "Environment.from_pip_requirements": "Environment",
    "Environment.from_conda_specification": "Environment",
    "Environment.from_docker_image": "Environment",
    "Environment.get": "Environment",
    "Dataset.File.from_files": "FileDataset",
    "Dataset.File.upload_directory": "FileDataset",
    "Dataset.get_by_name": "FileDataset",
    "FileDataset.register": "FileDataset",
    "Workspace.get_default_datastore": "Datastore",
    "Datastore.get": "Datastore",
    "Datastore.get_default": "Datastore",
    "ScriptRunConfig": "ScriptRunConfig",
    "HyperDriveConfig": "HyperDriveConfig",
    "HyperDriveRun.get_best_run_by_primary_metric": "Run",
    "CondaDependencies.create": "CondaDependencies",
    "CondaDependencies": "CondaDependencies",
}

# v1 names that work, but not exactly as v1 had them
DIFFERS = {
    "Workspace": "a workspace is a run store ($JUPYTER_TRAINER_HOME); Azure ids are kept, not used",
    "Workspace.from_config": "reads a config.json where there is one, and needs none",
    "ComputeTarget": "a target of targets.toml, by name (jupyter-trainer target add NAME ...)",
    "Environment": "built on the kernel's packages (inherit: true), as v1 built on its base image",
    "Environment.from_conda_specification": "conda names become PyPI projects; CUDA runtime "
    "packages and Azure ML's SDK are left out; conda-only packages are refused",
    "Environment.get": "a curated AzureML-* name is the kernel's own environment, with a note "
    "naming its torch; TensorFlow ones are refused",
    "Dataset.File.from_files": "several paths are read as one folder holding each by name",
    "CondaDependencies": "conda names become PyPI projects (see Environment.from_conda_specification)",
    "CondaDependencies.create": "conda names become PyPI projects",
    "Experiment": "an experiment is the name its runs share (jupyter-trainer runs lists it)",
    "Run.get_metrics": "rank 0's metrics",
    "Run.get_portal_url": "a file:// URL of the run's folder; the JupyterLab panel shows the run",
    "Run.get_details": "v1's keys, filled from the run's record",
    "Run.wait_for_completion": "streams rank 0's output (user_logs/std_log_process_0.txt)",
    "Run.get_file_names": "outputs/, logs/ and user_logs/std_log_process_N.txt",
    "ScriptRun.fail": "the script ends there with exit code 1 (v1 let it go on)",
    "ScriptRun.log_image": "kept as outputs/images/NAME.png",
    "ScriptRun.log_confusion_matrix": "kept as outputs/metrics/NAME.json",
    "ScriptRun.log_accuracy_table": "kept as outputs/metrics/NAME.json",
    "ScriptRun.log_predictions": "kept as outputs/metrics/NAME.json",
    "ScriptRun.log_residuals": "kept as outputs/metrics/NAME.json",
    "ScriptRun.upload_file": "names outside outputs/ and logs/ land under outputs/",
    "ScriptRun.get_status": "always Running: the script is the run",
    "ScriptRunConfig": "max_run_duration_seconds is not enforced",
    "RunDetails": "the run's widget; under papermill the text monitor, followed to the end",
    "Dataset.File.upload_directory": "copies into the store's datastore folder",
    "Datastore": "a folder of the run store (<home>/datastore/NAME)",
    "Datastore.as_mount": "a data input of the datastore's folder, a local path on each node",
    "DataPath.as_mount": "a data input of the datastore's folder, a local path on each node",
    "InteractiveLoginAuthentication": "nothing signs in to Azure: accepted and not used",
    "ServicePrincipalAuthentication": "nothing signs in to Azure: accepted, its secret not kept",
    "Workspace.get_default_datastore": "a folder of the run store (<home>/datastore/NAME)",
    "FileDataset.as_mount": "a local path on each node: read in place, or staged once",
    "FileDataset.as_download": "a local path on each node: read in place, or staged once",
    "PyTorch": "framework_version and use_gpu chose Azure images and machines: the "
    "environment's torch and the target's GPUs are used",
    "Estimator": "vm_size is refused; the target decides the machines",
    "BayesianParameterSampling": "Optuna's TPE, another Bayesian optimiser",
    "HyperDriveConfig": "a trial's objective is the primary metric's last value",
    "MedianStoppingPolicy": "Optuna's median pruner, from delay_evaluation on",
    "TruncationSelectionPolicy": "finished trials are always among those compared "
    "(exclude_finished_jobs=True is not honoured)",
    "Model": "a version of the model registry, with its run's lineage",
}

# v1 names that have no counterpart: each raises NotSupported naming what to do
REFUSED = {
    "AmlCompute": "add a target to targets.toml (jupyter-trainer target add NAME --kind ...)",
    "AmlCompute.provisioning_configuration": "add a target to targets.toml "
    "(jupyter-trainer target add NAME --kind ...)",
    "ComputeInstance": "add a target to targets.toml",
    "ComputeInstance.provisioning_configuration": "add a target to targets.toml",
    "AksCompute": "deployment is outside jupyter_trainer",
    "AksCompute.provisioning_configuration": "deployment is outside jupyter_trainer",
    "ComputeTarget.create": "add a target to targets.toml",
    "ComputeTarget.attach": "add a target to targets.toml",
    "Workspace.create": "a workspace is a run store: Workspace() or Workspace.from_config()",
    "Model.deploy": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "Model.package": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "Model.register": "register from the run: run.register_model(...)",
    "InferenceConfig": "deployment is outside jupyter_trainer",
    "Webservice": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "AciWebservice": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "AciWebservice.deploy_configuration": "serve the model with TorchServe or Triton",
    "AksWebservice": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "AksWebservice.deploy_configuration": "serve the model with TorchServe or Triton",
    "LocalWebservice": "serve the downloaded or ONNX-exported model with TorchServe or Triton",
    "Datastore.register_azure_blob_container": "credentials stay out of runs; give a presigned "
    "https:// URL to Dataset.File.from_files",
    "Datastore.register_azure_file_share": "credentials stay out of runs",
    "Datastore.register_azure_data_lake_gen2": "credentials stay out of runs",
    "Dataset.Tabular": "give the file as a file dataset and read it with pandas in the script",
    "Environment.from_existing_conda_environment": "export its packages and use "
    "from_conda_specification",
    "Environment.from_dockerfile": "build the image yourself, then from_docker_image",
    "TensorflowConfiguration": "this project runs PyTorch",
    "TensorFlow": "this project runs PyTorch",
    "Chainer": "this project runs PyTorch",
    "OutputFileDatasetConfig": "write outputs under ./outputs",
    "Workspace.delete": "remove the run store yourself",
    "ComputeTarget.delete": "remove the target's entry from targets.toml",
    "ComputeTarget.detach": "remove the target's entry from targets.toml",
    "AmlCompute.attach_configuration": "add a target to targets.toml",
    "AmlCompute.supported_vmsizes": "a target's nodes are what it names",
    "RemoteCompute": "add an ssh target to targets.toml",
    "RemoteCompute.attach_configuration": "add an ssh target to targets.toml",
    "FileDataset.mount": "read the dataset at its path in the notebook",
    "Model.add_tags": "give tags when the version is registered (register_model(tags=...))",
    "ParallelTaskConfiguration": "use MpiConfiguration or PyTorchConfiguration, or a sweep",
    "Run.log": "log from the script (Run.get_context().log)",
    "Run.upload_file": "upload from the script (Run.get_context().upload_file)",
}

# keyword arguments that are refused or not used, by the call that takes them
KEYWORDS = {
    "ScriptRunConfig": {
        "resume_from": ("refused", "resume with jt.resume(RUN_ID)"),
        "max_run_duration_seconds": ("differs", "not enforced"),
        "docker_runtime_config": ("differs", "the target runs the container, if any"),
    },
    "Estimator": {
        "vm_size": ("refused", "pick the compute_target instead"),
        "resume_from": ("refused", "resume with jt.resume(RUN_ID)"),
        "source_directory_data_store": ("refused", "the source folder is in the snapshot"),
        "use_gpu": ("differs", "the target decides the GPUs"),
        "framework_version": ("differs", "the environment's torch is used"),
    },
    "HyperDriveConfig": {
        "pipeline": ("refused", "sweep a script (run_config=)"),
        "resume_from": ("refused", "resume a sweep with jt.get_sweep(ID).resume()"),
    },
}
KEYWORDS["PyTorch"] = KEYWORDS["Estimator"]

# Inside a run (a script that calls Run.get_context()), the notebook's names refuse: the
# script has no workspace. What to do instead, by name.
# The azureml modules a training script finds inside a run (``rankside/azureml_v1``)
SCRIPT_MODULES = {
    "azureml.core",
    "azureml.core.run",
    "azureml.core.model",
    "azureml.core.workspace",
    "azureml.core.dataset",
    "azureml.core.datastore",
    "azureml.core.experiment",
}

# v1 calls a training script makes that work differently inside a run here
SCRIPT_DIFFERS = {
    "Model.register": "registered once the run has completed, by the notebook's "
    "wait_for_completion (a path outside ./outputs is copied there first)",
    "ScriptRun.register_model": "registered once the run has completed, by the notebook's "
    "wait_for_completion",
}

SCRIPT_REFUSED = {
    "Workspace": "the run has no workspace: read data inputs as run.input_datasets[NAME]",
    "Dataset": "a dataset is run.input_datasets[NAME] (as_named_input(NAME) in the notebook)",
    "Datastore": "pass the data as an input of the run (Dataset.File.from_files in the notebook)",
    "Model": "write the model under ./outputs and register it with Model.register or "
    "run.register_model",
    "Experiment": "the run's experiment is run.experiment (its name)",
}
