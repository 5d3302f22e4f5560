"""Slow or exact implementations the product's algorithms are compared with, by the unit tests and
the benchmarks alike (the harness is the one place both may import)."""
