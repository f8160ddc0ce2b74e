"""Layer 9 and above: what people use. ``views/`` is pure view code (text, summaries,
feeds, charts) that the others share; ``widgets/`` the notebook widgets; ``commands/`` the one
command table of ``jupyter-trainer`` and ``%train``; ``magics/``, ``cli.py`` and ``server/``
(the REST API of the JupyterLab panel) are the front ends, and never import each other.
Only front ends turn errors into messages, HTTP codes or exit codes."""
