"""``azure.ai``: only ``azure.ai.ml`` has a counterpart here (``jupyter_trainer.azure.ai.ml``)."""
