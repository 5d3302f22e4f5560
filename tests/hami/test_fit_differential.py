"""Differential Fit (issue 21, item 3): hami_place_core's Fit against the real HAMi scheduler.

A seeded generator (testbed/hami/fit_cases.py) builds at least 300 cases per seed; for each, HAMi's own
Filter (testbed/hami/fit_probe.py) and the model (testbed/hami/fit_diff.py) say whether the pod fits each
node and on which GPUs. The target is 0 disagreements. docs/hami-fit-differential.md has the
method, the results per seed and every fix it led to.

    FITDIFF_SEEDS=21,7,1234 FITDIFF_CASES=320 FITDIFF_REPORT_DIR=build/fitdiff \\
        HAMI_SCHEDULER_BIN=/path/to/scheduler .venv/bin/pytest tests/hami -m hami_only -s
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbed.hami.fit_cases import generate
from testbed.hami.fit_diff import judge, render, save_answers, summary, write_report
from testbed.hami.fit_probe import FitProbe

pytestmark = [pytest.mark.hami_only, pytest.mark.testbed, pytest.mark.timeout(1800)]

SEEDS = [int(s) for s in os.environ.get("FITDIFF_SEEDS", "21").split(",") if s.strip()]
CASES = int(os.environ.get("FITDIFF_CASES", "320"))
BATCH = 40  # cases whose nodes and pods exist at once


@pytest.mark.parametrize("seed", SEEDS)
def test_model_fit_agrees_with_hami(seed, testbed, ns, tmp_path) -> None:
    assert CASES >= 300, "issue 21 asks for at least 300 cases per seed"
    cases = generate(seed, CASES)
    probe = FitProbe(testbed, ns)
    t0 = time.monotonic()
    answers = []
    for start in range(0, len(cases), BATCH):
        answers += probe.run(cases[start : start + BATCH])
    verdicts = [judge(c, a) for c, a in zip(cases, answers, strict=True)]
    report = summary(seed, verdicts, time.monotonic() - t0)
    directory = Path(os.environ.get("FITDIFF_REPORT_DIR") or tmp_path)
    path = write_report(directory, report)
    kept = save_answers(directory, seed, answers)  # python -m testbed.hami.fit_diff judges them again
    print(f"\n{render(report)}\nreport: {path}\nHAMi's answers: {kept}")
    assert report["cases"] >= 300
    assert report["disagreements"] == 0, f"{render(report)}; first: {report['examples'][:5]}"
