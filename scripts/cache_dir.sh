# Sourced by the other scripts: where they keep what they build once, outside the repository
# (the Horovod wheel, the lab extension's node_modules, the other-torch venv, mypy's cache),
# so that a fresh clone reuses it: $JT_CACHE, else $XDG_CACHE_HOME or ~/.cache, /jupyter_trainer.
CACHE=${JT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter_trainer}
