"""Azure ML SDK v1 data and models, run here: file datasets of several URLs and paths read
as one folder, a datastore given ``as_mount``, a dataset offering download, mount and
``to_path`` in the script, URLs whose names would leave the folder, and a model the script
registers, which lands in the registry once the run completes."""

from __future__ import annotations

import pytest
from support.azureml_project import DATA, PROJ, check_reported

from jupyter_trainer.azureml.core import (
    Dataset,
    Experiment,
    ScriptRunConfig,
    Workspace,
)
from jupyter_trainer.azureml.errors import ActivityFailedException, UserErrorException
from jupyter_trainer.azureml.train.dnn import PyTorch

READ_FOLDER = """
import argparse, hashlib, os
from azureml.core.run import Run
parser = argparse.ArgumentParser()
parser.add_argument("--data-folder")
folder = parser.parse_args().data_folder
for root, _, files in sorted(os.walk(folder)):
    for name in sorted(files):
        path = os.path.join(root, name)
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()[:12]
        print("file", os.path.relpath(path, folder), digest, flush=True)
Run.get_context().log("files", sum(len(f) for _, _, f in os.walk(folder)))
"""


def test_a_dataset_of_several_urls_and_paths_is_read_as_one_folder(home, tmp_path):
    """v1's MNIST tutorial: ``Dataset.File.from_files(path=[url, url, ...])``, registered, then
    mounted. The run reads one folder holding each path under its own name; a URL is
    downloaded once, and a change of a local file is what the next run reads."""
    import hashlib

    from support.http_servers import Server, Site

    def short(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:12]

    site = Site(files={"train-images.gz": b"images" * 1000, "labels.gz": b"lbl"})
    server = Server(site)
    local = tmp_path / "extra.txt"
    local.write_text("first")
    folder = tmp_path / "more"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.bin").write_bytes(b"a")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "read.py").write_text(READ_FOLDER)
    ws = Workspace()
    paths = [server.url("/file/train-images.gz"), server.url("/file/labels.gz"), str(local)]
    dataset = Dataset.File.from_files(path=[*paths, str(folder)]).register(ws, "mnist")
    assert Dataset.get_by_name(ws, "mnist").to_path() == sorted(
        ["/train-images.gz", "/labels.gz", "/extra.txt", "/more"]
    )

    def submit():
        config = ScriptRunConfig(
            source_directory=str(tmp_path / "proj"),
            script="read.py",
            arguments=["--data-folder", Dataset.get_by_name(ws, "mnist").as_mount()],
        )
        run = Experiment(ws, "mnist").submit(config)
        run.wait_for_completion()
        return run

    try:
        first = submit()
        local.write_text("second")
        second = submit()
    finally:
        server.close()
    expected = {
        "train-images.gz": short(b"images" * 1000),
        "labels.gz": short(b"lbl"),
        "more/sub/a.bin": short(b"a"),
    }
    for run, text in ((first, b"first"), (second, b"second")):
        log = run.run.logs(0)
        for name, digest in {**expected, "extra.txt": short(text)}.items():
            assert f"file {name} {digest}" in log, log
        assert run.get_metrics()["files"] == 4
    gets = [r for r in site.requests if r.method == "GET"]
    assert sorted(r.path for r in gets) == ["/file/labels.gz", "/file/train-images.gz"]
    assert dataset.name == "mnist"


def test_a_dataset_of_paths_with_the_same_name_is_refused_naming_both(home, tmp_path):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "data.csv").write_text(sub)
    dataset = Dataset.File.from_files(
        path=[str(tmp_path / "a" / "data.csv"), str(tmp_path / "b" / "data.csv")]
    )
    with pytest.raises(UserErrorException, match="both named 'data.csv'.*different names"):
        dataset.source
    assert not (home / "runs").exists()


def test_an_estimator_reads_a_datastore_given_with_as_mount(home):
    """v1's estimator pattern ``script_params={'--data-dir': ds.as_mount()}``, with the
    workspace's default datastore and with a path of it: each is a data input named after
    the datastore (and path), read where it is."""
    ws = Workspace()
    ds = ws.get_default_datastore()
    ds.upload(src_dir=str(DATA), target_path="numbers", show_progress=False)
    for reference, name in (
        (ds.path("numbers").as_mount(), "workspaceblobstore_numbers"),
        (ds.path("numbers", data_reference_name="numbers").as_download(), "numbers"),
    ):
        estimator = PyTorch(
            source_directory=str(PROJ),
            compute_target="local",
            entry_script="train.py",
            script_params={"--data-dir": reference, "--epochs": 3},
        )
        run = Experiment(ws, "datastore").submit(estimator)
        run.wait_for_completion()
        assert run.run.spec.code.args[:2] == ("--data-dir", f"${{{{data.{name}}}}}")
        check_reported(run, ranks=1, datasets=(name,))
    with pytest.raises(UserErrorException, match="does not exist"):
        ds.path("missing").as_mount()
    whole = ds.as_mount()
    assert whole.name == "workspaceblobstore" and whole.dataset.source == str(ds.root.resolve())


REGISTERS = """
import os, sys
from azureml.core.run import Run
run = Run.get_context()
os.makedirs("outputs", exist_ok=True)
with open("outputs/model.pt", "w") as f:
    f.write("weights")
model = run.register_model(model_name="pt-dnn", model_path="outputs/model.pt",
                           tags={"area": "birds"}, description="from the script")
print("asked", model.name, model.version, flush=True)
from azureml.core.model import Model
with open("scaler.bin", "w") as f:
    f.write("scaler")
Model.register(workspace=run.experiment.workspace, model_path="scaler.bin", model_name="scaler")
if "--fail" in sys.argv:
    raise SystemExit(2)
"""


def test_a_model_the_script_registers_lands_in_the_registry_once_the_run_completes(home, tmp_path):
    """``run.register_model`` and ``Model.register`` inside an unchanged v1 script: the
    notebook's ``wait_for_completion`` registers them, once, with the run's lineage; a
    failed run registers nothing."""
    from jupyter_trainer.api.models import models
    from jupyter_trainer.azureml.core import Model

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "register.py").write_text(REGISTERS)
    ws = Workspace()

    def submit(*arguments):
        config = ScriptRunConfig(
            source_directory=str(tmp_path / "proj"), script="register.py", arguments=arguments
        )
        return Experiment(ws, "registers").submit(config)

    failed = submit("--fail")
    with pytest.raises(ActivityFailedException):
        failed.wait_for_completion()
    assert models(home=home) == []
    run = submit()
    run.wait_for_completion()
    assert "asked pt-dnn None" in run.run.logs(0)
    run.wait_for_completion()  # a second wait registers nothing more
    (version,) = models("pt-dnn", home=home)
    assert version.lineage["run_id"] == run.id and version.version == 1
    assert version.tags["area"] == "birds" and version.tags["description"] == "from the script"
    assert Model(ws, "pt-dnn").version == 1
    (scaler,) = models("scaler", home=home)  # Model.register in the script: copied to outputs/
    assert scaler.lineage["source"] == "registered/scaler/scaler.bin"
    assert scaler.path.read_text() == "scaler"
    assert not any(k.startswith("azureml.") for k in run.get_tags())


USES_THE_DATASET = """
import os
from azureml.core.run import Run
run = Run.get_context()
dataset = run.input_datasets["numbers"]
print("paths", dataset.to_path())
print("copied", [os.path.relpath(p) for p in dataset.download(target_path="copy", overwrite=True)])
with dataset.mount() as context:
    print("mounted", sorted(os.listdir(context.mount_point)))
print("is a path", os.path.isdir(dataset))
run.upload_file(name="outputs/copy.txt", path_or_stream="copy/numbers.txt", datastore_name="x")
"""


def test_a_dataset_given_as_it_is_offers_download_mount_and_to_path_in_the_script(home, tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "uses.py").write_text(USES_THE_DATASET)
    config = ScriptRunConfig(
        source_directory=str(tmp_path / "proj"),
        script="uses.py",
        arguments=[Dataset.File.from_files(path=str(DATA)).as_named_input("numbers")],
    )
    run = Experiment(Workspace(), "direct").submit(config)
    run.wait_for_completion()
    log = run.run.logs(0)
    assert "paths ['/numbers.txt']" in log and "copied ['copy/numbers.txt']" in log
    assert "mounted ['numbers.txt']" in log and "is a path True" in log
    assert (run.run.outputs / "copy.txt").read_text() == (DATA / "numbers.txt").read_text()


@pytest.mark.parametrize(
    "leaf",
    ["..%2F..%2Fescaped.txt", "%2E%2E", "a%5Cb", "%00x"],
    ids=["slash", "dots", "backslash", "nul"],
)
def test_a_url_whose_decoded_name_leaves_the_folder_is_refused(leaf, home, tmp_path):
    """The name a URL gives its file in the gathered folder is decoded: one that would step
    out of the folder (or is no name) is refused, and nothing is written outside it."""
    (tmp_path / "a.txt").write_text("a")
    dataset = Dataset.File.from_files(
        path=[f"http://127.0.0.1:9/data/{leaf}", str(tmp_path / "a.txt")]
    )
    with pytest.raises(UserErrorException, match="does not end in a file or folder name"):
        dataset.source
    assert not list(home.rglob("escaped.txt"))
