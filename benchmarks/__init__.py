"""Benchmarks and probes: scripts that measure the packages (run from the repository root: benchmarks/README.md)."""
