"""The benchmarks, each run as a module from the repository root: ``python -m bench.<name> --help``
(docs/benchmarks.md has the commands and the recorded results). They share code with the tests only
through ``testbed`` (an import contract)."""
