"""Workspaces that members share, as real Unix users: trust, owners, secrets, the PostgreSQL
index, a store over the network."""
