"""The release tools, each run as a module from the repository root (``python -m release.release``,
``python -m release.image``, ``python -m release.cli_reference``, ``python -m release.architecture_diagram``;
the Makefile's targets run them) and the PyInstaller spec with its entry point (``entry.py``). They
use the product packages and ``toolchain``, never the test harness, the tests or the benchmarks."""
