"""Replay the openb GPU-cluster trace with HAMi's default placement (testbed/data/openb.py): the command line.

.venv/bin/python -m bench.openb_replay --pods gpushare40 --cut 0.99 --no-departures --out snap.json.gz
"""

from __future__ import annotations

import sys

from testbed.data.openb import main

if __name__ == "__main__":
    sys.exit(main())
