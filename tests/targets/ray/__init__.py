"""The Ray target against a real two-node Ray cluster on this machine."""
