"""The lab extension and the widgets in a real JupyterLab and Notebook 7, in headless
Chromium."""
