"""A model version is its folder's owner's, by the kernel: a member who made ``models/``
first (so may rename anything in it) and puts his own folder in place of a colleague's
version cannot have it shown, downloaded or indexed as hers."""

from __future__ import annotations

import json
import os
import pwd

from support.workspace_team import MAKE_RUN

REGISTER = """
import sys
from jupyter_trainer.store import Store
store = Store()
(store.paths(sys.argv[1]).outputs / "model.pt").write_bytes(sys.argv[3].encode())
from jupyter_trainer.api.models import register_model
print(register_model(store, sys.argv[1], sys.argv[2], "model.pt").version)
"""

# bob owns models/: he moves alice's digits aside and puts his own files in its place, with
# a copy of her lineage.json whose sizes and hashes he made match his bytes
REPLACE = """
import hashlib, json, os, sys
from pathlib import Path
models = Path(sys.argv[1])
lineage = json.loads((models / "digits" / "1" / "lineage.json").read_text())
os.rename(models / "digits", models / ".moved")
here = models / "digits" / "1"
here.mkdir(parents=True)
data = b"his weights"
(here / "model.pt").write_bytes(data)
lineage["files"] = [{"path": "model.pt", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
(here / "lineage.json").write_text(json.dumps(lineage))
"""


def _register(team, user: str, name: str, data: str) -> str:
    run_id = team.python(user, MAKE_RUN, f"{user}-run", "ended").stdout.strip()
    team.python(user, REGISTER, run_id, name, data)
    return run_id


def test_a_version_put_in_place_by_the_owner_of_models_is_refused(bare_team):
    team = bare_team  # set up before the administrator made models/: a member makes it
    alice, bob = team.users
    _register(team, bob, "his", "first")  # bob makes models/
    assert pwd.getpwuid(os.stat(team.workspace / "models").st_uid).pw_name == bob
    _register(team, alice, "digits", "her weights")
    before = json.loads(team.cli(alice, "models", "show", "digits@1", "--json").stdout)
    assert before["owner"]["user"] == alice
    team.python(bob, REPLACE, str(team.workspace / "models"))

    shown = team.cli(alice, "models", "show", "digits@1", check=False)
    assert shown.returncode != 0, shown.stdout
    assert "damaged" in shown.stderr and f"its folder belongs to {bob}" in shown.stderr, (
        shown.stderr
    )
    assert "Traceback" not in shown.stderr
    dest = team.root / alice / "got"
    got = team.cli(alice, "models", "download", "digits@1", str(dest), check=False)
    assert got.returncode != 0 and f"its folder belongs to {bob}" in got.stderr, got.stderr
    assert not (dest / "model.pt").exists()

    team.cli(team.admin, "doctor", "--no-hash", "--fix", check=False)  # adopts nothing
    doctor = team.cli(team.admin, "doctor", "--no-hash", check=False)
    assert f"model digits@1: its lineage.json is damaged: it says it was registered by {alice}" in (
        doctor.stdout
    ), doctor.stdout
    models = team.workspace / "models"
    assert f"workspace top folder {models}: belongs to {bob}, a member" in doctor.stdout
    listed = team.cli(alice, "models", "show", "digits@1", check=False)
    assert listed.returncode != 0


def test_a_version_says_it_is_by_its_folders_owner(team):
    """bob's own folder with a lineage that says bob registered it is his: ``show`` says
    so, whatever name its record gives."""
    alice, bob = team.users
    _register(team, bob, "his", "first")
    lineage_file = team.workspace / "models" / "his" / "1" / "lineage.json"
    lineage = json.loads(lineage_file.read_text())
    assert lineage["owner"]["user"] == bob and lineage["user"] == bob
    forged = (
        "import json, os, sys\n"
        "path, name = sys.argv[1], sys.argv[2]\n"
        "lineage = json.loads(open(path).read())\n"
        "lineage['user'] = name\n"
        "lineage['owner']['user'] = name\n"
        "folder = os.path.dirname(path)\n"
        "os.chmod(folder, 0o755)\n"
        "os.unlink(path)\n"
        "open(path, 'w').write(json.dumps(lineage))\n"
        "os.chmod(folder, 0o555)\n"
    )
    team.python(bob, forged, str(lineage_file), alice)
    shown = team.cli(alice, "models", "show", "his@1").stdout
    assert f"by {bob}" in shown and f"by {alice}" not in shown, shown
    as_json = json.loads(team.cli(alice, "models", "show", "his@1", "--json").stdout)
    assert as_json["owner"]["user"] == bob and as_json["user"] == bob


def test_download_refuses_a_file_someone_else_wrote_into_a_version(team):
    """A file of alice's version that is bob's (the same bytes, so its hash matches) is not
    the file alice registered: ``models download`` copies nothing."""
    alice, bob = team.users
    _register(team, alice, "digits", "her weights")
    path = team.workspace / "models" / "digits" / "1" / "model.pt"
    path.unlink()
    team.write(bob, path, "her weights", 0o444)
    dest = team.root / alice / "got"
    got = team.cli(alice, "models", "download", "digits@1", str(dest), check=False)
    assert got.returncode != 0, got.stdout
    assert f"model.pt of model digits@1 belongs to {bob}, not to {alice}" in got.stderr
    assert not (dest / "model.pt").exists()
