"""One command table for ``jupyter-trainer`` and ``%train``: both list every command of it
in their help (generated from the same parsers), neither lists the spellings of earlier
releases, and those spellings still do what they did."""

from __future__ import annotations

import re

from conftest import leftover
from support.jt_cli import cli

from jupyter_trainer.api.sweeps import functions as sweep_api
from jupyter_trainer.frontends.commands.table import COMMANDS

# Spellings that worked before the nouns had verbs; each must keep working, unlisted.
HIDDEN = ["sweep-show", "sweep-resume", "sweep-cancel"]
# Nouns and the verbs their own --help lists.
VERBS = {
    "sweep": ["start", "show", "resume", "cancel"],
    "models": ["list", "show", "download", "register", "delete"],
    "env": ["list", "show", "export", "build", "prune"],
    "target": ["add"],
    "mlflow": ["sync"],
}


def listed(help_text: str) -> set[str]:
    """The commands a help text lists, each on its own line with its one-line description."""
    return set(re.findall(r"^ {2,}([a-z][\w-]*)(?: {2,}|\n {8,})\S", help_text, re.M))


def magic_help(ip, capsys, line: str) -> str:
    capsys.readouterr()
    assert ip.run_cell(line, store_history=True).success
    return capsys.readouterr().out


def test_every_command_is_listed_by_both_front_ends_and_no_hidden_spelling(home, ip, capsys):
    shown = cli("--help")
    assert shown.returncode == 0, shown.stderr
    assert listed(shown.stdout) == set(COMMANDS), shown.stdout
    for line in ("%train", "%train help", "%train --help"):
        text = magic_help(ip, capsys, line)
        assert listed(text) == set(COMMANDS) | {"attach"}, (line, text)
        assert "%train path/to/script.py" in text and "%%train" in text
    for text in (shown.stdout, magic_help(ip, capsys, "%train")):
        for hidden in HIDDEN:
            assert hidden not in text
        assert "pools" in listed(text)


def test_a_noun_lists_its_verbs(home, ip, capsys):
    for noun, verbs in VERBS.items():
        shown = cli(noun, "--help")
        assert shown.returncode == 0, shown.stderr
        assert listed(shown.stdout) == set(verbs), (noun, shown.stdout)
        assert listed(magic_help(ip, capsys, f"%train {noun} --help")) == set(verbs)
    start = cli("sweep", "start", "--help").stdout
    assert "--sweep KEY=EXPR" in start and "--trials" in start and "--no-wait" in start


def test_the_spellings_of_earlier_releases_still_work(home, ip, capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "from jupyter_trainer import runtime as jt\njt.log(step=0, y=jt.params['x'])\n"
    )
    # `sweep SCRIPT` (no verb) is `sweep start SCRIPT`
    started = cli(
        "sweep",
        str(script),
        "--sweep",
        "x=choice(1,2)",
        "--trials",
        "2",
        "--metric",
        "y",
        "--launcher",
        "python",
        "--wait",
    )
    assert started.returncode == 0, started.stderr
    sweep_id = started.stdout.strip()
    sweep = sweep_api.get_sweep(sweep_id)
    assert sweep.status == "completed" and len(sweep.state["trials"]) == 2
    for old, new in [
        (["sweep-show", sweep_id], ["sweep", "show", sweep_id]),
        (["sweep-show", sweep_id, "--json"], ["sweep", "show", sweep_id, "--json"]),
        (["sweep-resume", sweep_id], ["sweep", "resume", sweep_id]),
        (["sweep-cancel", sweep_id], ["sweep", "cancel", sweep_id]),
        (["sweep-show", "nope"], ["sweep", "show", "nope"]),
    ]:
        was, now = cli(*old), cli(*new)
        assert (was.returncode, was.stdout, was.stderr) == (now.returncode, now.stdout, now.stderr)
        assert was.stdout or was.stderr
    shown = cli("sweep", "show", sweep_id)
    assert shown.returncode == 0 and sweep_id in shown.stdout and "x=" in shown.stdout
    capsys.readouterr()
    assert ip.run_cell(f"%train sweep-show {sweep_id}", store_history=True).success
    assert capsys.readouterr().out == shown.stdout
    for run in sweep.trials():
        assert leftover(run.id) == []


def test_an_option_of_another_verb_names_its_verb(home, ip, capsys):
    done = cli("env", "show", "delta", "--dry-run")
    assert done.returncode == 2
    assert "unrecognized arguments: --dry-run; --dry-run goes with `env prune`" in done.stderr
    done = cli("cancel", "some-run", "--statsu")
    assert done.returncode == 2 and "did you mean --status?" in done.stderr
    assert "\n" not in done.stderr.strip()


def test_the_magic_follows_what_a_starting_command_of_the_table_starts(home, ip, capsys, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hello from submit')\n")
    result = ip.run_cell(f"%train submit {script} --launcher python", store_history=True)
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed" and run.spec.origin.get("cwd")  # followed, as %%train
    assert "hello from submit" in run.logs(0)
    capsys.readouterr()
    result = ip.run_cell(f"%train rerun {run.id} --no-wait", store_history=True)
    assert result.success, result.error_in_exec
    again = result.result
    assert capsys.readouterr().out.startswith(
        f"run {again.id} started; follow it with %train attach {again.id}\n"
    )
    again.wait()
    assert again.status == "completed" and leftover(again.id) == []


def test_environment_help_is_made_from_the_parsers_of_env_and_of_a_definition(home, ip, capsys):
    env_help = cli("env", "--help").stdout
    verbs = {
        verb: re.search(rf"^ +{verb} +(.+)$", env_help, re.M).group(1)  # type: ignore[union-attr]
        for verb in VERBS["env"]
    }
    for line in ("%environment --help", "%environment help"):
        text = magic_help(ip, capsys, line)
        assert listed(text) >= set(verbs), text
        for verb, described in verbs.items():
            assert re.search(rf"^ +{verb} +{re.escape(described)}$", text, re.M), (verb, text)
        for option in ("--pip", "--requirements", "--python", "--var", "--inherit", "--image"):
            assert re.search(rf"^ +{option}\b.* \S", text, re.M), (option, text)
        assert "%%environment NAME [--build]" in text
    show = magic_help(ip, capsys, "%environment show --help")
    assert "usage: %environment show" in show
