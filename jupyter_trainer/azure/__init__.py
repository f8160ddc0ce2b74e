"""Azure ML SDK v2's notebook side (``azure.ai.ml``, ``azure.identity``), mapped onto
jupyter_trainer (docs/azure-v2.md). A v2 notebook changes only its import lines:
``from azure.ai.ml import X`` becomes ``from jupyter_trainer.azure.ai.ml import X``."""
