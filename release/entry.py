"""PyInstaller entry point for the kubectl-hami_place binary."""

import sys

from kubectl_hami_place.cli import main

if __name__ == "__main__":
    sys.exit(main())
