"""The front ends: ``cli/``, ``magics/``, ``views/``, ``widgets/``, ``server/``, ``browser/``
(JupyterLab and Notebook 7 in headless Chromium), ``azureml/`` (Azure ML SDK v1 code run here)."""
