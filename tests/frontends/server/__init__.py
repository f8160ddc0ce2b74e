"""The REST API and the run view's feed on a real in-process jupyter_server."""
