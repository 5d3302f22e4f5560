"""Replay the openb GPU-cluster trace with HAMi's default placement (testbed/openb.py): the command line.

.venv/bin/python bench/openb_replay.py --pods gpushare40 --cut 0.99 --no-departures --out snap.json.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.openb import main

if __name__ == "__main__":
    sys.exit(main())
