"""Runs' metrics in TensorBoard: event files written from the run store (``export``), and a
TensorBoard server over them that keeps live runs' files growing (``server``).

TensorBoard is an optional extra (``pip install jupyter_trainer[tensorboard]``): importing
this package needs nothing of it; using it without TensorBoard raises ``MissingExtra``.
"""
