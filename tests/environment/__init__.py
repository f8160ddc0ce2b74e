"""``%%environment``: definitions, locks and builds with the real uv, pruning, and runs in
them."""
