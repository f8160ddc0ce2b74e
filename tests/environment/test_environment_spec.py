"""Environment definitions: validation with clear errors, versioning, the registry. No network."""

from __future__ import annotations

import json

import pytest

from jupyter_trainer.core.errors import EnvError
from jupyter_trainer.core.spec import CodeSpec, EnvSpec, RunSpec
from jupyter_trainer.environment import EnvDefinition, Registry, from_line
from jupyter_trainer.rankside.programs.env_build import parse_lock

EXAMPLE = """\
python: "3.11"
inherit: true          # layer on the kernel's own packages
pip:
  - scikit-learn==1.7.*
  - rich
env:
  OMP_NUM_THREADS: "1"
"""


def test_the_issue_example_parses():
    d = EnvDefinition.from_yaml("digits", EXAMPLE)
    assert (d.python, d.inherit, d.pip, d.env) == (
        "3.11",
        True,
        ("scikit-learn==1.7.*", "rich"),
        {"OMP_NUM_THREADS": "1"},
    )
    assert d.image is None and len(d.version) == 12


@pytest.mark.parametrize(
    "body, message",
    [
        ("pythn: '3.11'", "unknown key `pythn:`; did you mean `python:`?"),
        (
            "packages: [six]",
            "unknown key `packages:`; the keys are python, pip, env, inherit, image",
        ),
        ("conda:\n  - numpy", "conda is not supported: no conda channel is reachable"),
        ("channels: [defaults]\ndependencies: [numpy]", "conda is not supported"),
        ("python: 3.10", "was read as a number by YAML (3.10 becomes 3.1); quote the version"),
        ("python: '3.x'", "python: '3.x' is not a Python version; write a version like \"3.11\""),
        ("python: 'python3.11'", "is not a Python version"),
        ("pip: six", "pip: must be a list"),
        ("pip:\n  - six: 1.16", "is not a requirement string"),
        ("pip:\n  - scikit-learn==1.x", "'1.x' is not a version; versions are numbers like 1.7"),
        ("pip:\n  - 'six=1.16'", "'=1.16' is not a version constraint; use ==, >="),
        ("pip:\n  - '-e .'", "'-e .' is not a requirement"),
        ("pip:\n  - 'six>>1'", "is not a version"),
        ("pip: {file: r.txt}", "pip: as a mapping takes only `requirements: PATH`"),
        ("requirements: r.txt", "`requirements:` goes under `pip:`"),
        ("env:\n  OMP_NUM_THREADS: 1.5", "must be a string; quote it"),
        ("env:\n  1BAD: x", "is not a variable name"),
        ("env:\n  RANK: '3'", "RANK is set by the launcher"),
        ("env:\n  JT_RUN_ID: x", "JT_RUN_ID is set by the launcher or jupyter_trainer"),
        ("env: [A, B]", "env: must be a mapping"),
        ("inherit: 'yes please'", "inherit: 'yes please' must be true or false"),
        ("image: 'not an image'", "is not a container image reference"),
        ("- just\n- a list", "the cell must be a YAML mapping"),
        ("python: [", "the cell is not valid YAML"),
    ],
)
def test_bad_definitions_name_the_key_and_the_fix(body, message):
    with pytest.raises(EnvError) as info:
        EnvDefinition.from_yaml("bad", body)
    assert message in str(info.value)
    assert str(info.value).startswith("environment 'bad': ")


@pytest.mark.parametrize("name", ["", "a b", "../x", "show", "list", "x@1", "-x"])
def test_bad_names_are_refused(name):
    with pytest.raises(EnvError):
        EnvDefinition.from_yaml(name, "")


def test_requirements_file_is_read_and_its_content_versioned(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# comment\nsix==1.16.0  # pinned\n\ntomli>=2 \\\n  ,<3\n")
    d = EnvDefinition.from_yaml("r", "pip:\n  requirements: requirements.txt", tmp_path)
    assert d.pip == ("six==1.16.0", "tomli>=2 ,<3") and d.requirements_file == "requirements.txt"
    first = d.version
    req.write_text("six==1.17.0\n")
    assert (
        EnvDefinition.from_yaml("r", "pip: {requirements: requirements.txt}", tmp_path).version
        != first
    )
    req.write_text("-r other.txt\n")
    with pytest.raises(EnvError, match="option '-r' is not supported"):
        EnvDefinition.from_yaml("r", "pip: {requirements: requirements.txt}", tmp_path)
    with pytest.raises(EnvError, match="cannot read"):
        EnvDefinition.from_yaml("r", "pip: {requirements: missing.txt}", tmp_path)


def test_version_is_a_content_hash():
    a = EnvDefinition.from_yaml("a", "pip: [six]\ninherit: true")
    assert (
        EnvDefinition.from_yaml("a", "inherit: true\npip:\n  - six  # same\n").version == a.version
    )
    assert EnvDefinition.from_yaml("a", "pip: [six, tomli]\ninherit: true").version != a.version
    assert EnvDefinition.from_yaml("a", "pip: [six]").version != a.version


def test_line_form_builds_the_same_definition():
    line = from_line(
        "digits",
        pip=["scikit-learn==1.7.*", "rich"],
        python="3.11",
        variables=["OMP_NUM_THREADS=1"],
        inherit=True,
    )
    assert line.version == EnvDefinition.from_yaml("digits", EXAMPLE).version
    with pytest.raises(EnvError, match="--var 'X': write --var NAME=VALUE"):
        from_line("d", variables=["X"])
    with pytest.raises(EnvError, match="give --pip or --requirements, not both"):
        from_line("d", pip=["six"], requirements="r.txt")


def test_registry_versions_and_latest(tmp_path):
    reg = Registry(tmp_path)
    v1 = EnvDefinition.from_yaml("e", "pip: [six]")
    v2 = EnvDefinition.from_yaml("e", "pip: [six, tomli]")
    assert reg.define(v1)[1] is True
    assert reg.define(v1)[1] is False  # same content: same version, nothing new
    assert reg.define(v2)[1] is True
    assert reg.get("e").version == v2.version
    assert reg.get("e", v1.version[:6]).definition.pip == ("six",)  # a unique prefix is enough
    assert [r.version for r in reg.versions("e")] == [v1.version, v2.version]
    reg.define(v1)  # redefining old content makes it latest again
    assert reg.get("e").version == v1.version and len(reg.versions("e")) == 2
    assert reg.names() == ["e"]
    with pytest.raises(EnvError, match=r"unknown environment 'nope'.*\(defined: e\)"):
        reg.get("nope")
    with pytest.raises(EnvError, match="environment e@abcdef does not exist; versions of 'e'"):
        reg.get("e", "abcdef")
    with pytest.raises(EnvError, match="invalid environment version"):
        reg.get("e", "../x")


def test_registry_refuses_a_hand_edited_definition(tmp_path):
    reg = Registry(tmp_path)
    record, _ = reg.define(EnvDefinition.from_yaml("e", "pip: [six]"))
    path = tmp_path / "environments" / "definitions" / "e" / f"{record.version}.json"
    data = json.loads(path.read_text())
    data["definition"]["pip"] = ["tomli"]
    path.write_text(json.dumps(data))
    with pytest.raises(EnvError, match="does not match its version hash"):
        reg.get("e")


def test_env_spec_round_trips_through_json():
    env = EnvSpec(
        name="digits",
        version="abc123",
        python="/x/bin/python",
        lock="k",
        variables={"OMP_NUM_THREADS": "1"},
        prepared={"built": True, "preflight": {"ok": True}},
    )
    spec = RunSpec(name="r", code=CodeSpec(entry="_jt/cell.py", hash="h"), env=env)
    again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.env == env
    with pytest.raises(ValueError, match="must map names to strings"):
        EnvSpec(variables={"A": 1})


def test_lock_parsing_joins_continuations_and_skips_comments():
    text = (
        "six==1.16.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n    # via -r requirements.in\n"
        "Tomli_W==1.0+local ; python_version >= '3'\nfoo @ https://x/foo.whl\n"
    )
    entries = parse_lock(text)
    assert [(e["name"], e["version"], e["hashed"]) for e in entries] == [
        ("six", "1.16.0", True),
        ("tomli-w", "1.0+local", False),
        (None, None, False),
    ]
