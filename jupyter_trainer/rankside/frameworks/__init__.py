"""Framework code reporting to the run with no extra line (``--no-autolog`` turns it off).

- ``autolog.py``: which framework module is patched, and how, once the rank's code imports it;
- ``import_hooks.py``: a module patched once it is imported, never sooner;
- ``hf_hooks.py``, ``accelerate_state.py``: transformers' ``Trainer`` and Accelerate;
- ``lightning_hooks.py``: Lightning's ``Trainer``, Fabric and loggers;
- ``mlflow_hooks.py``, ``wandb_hooks.py``, ``trackers.py``: MLflow's and W&B's calls;
- ``onnx_export.py``: ``jt.export_onnx``, a trained model checked against onnxruntime.
"""
