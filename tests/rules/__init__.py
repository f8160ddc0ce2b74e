"""Rules over the whole tree (layers, the docs' code and paths, the suite's package names) and
the suite's own machinery (fixture budgets, daemons, port blocks, the GPU bench's smoke test)."""
