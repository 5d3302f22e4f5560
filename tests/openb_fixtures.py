"""Small openb-format traces written to CSV files, for the replay's tests and the planner baselines'
(a helper module: test modules import it, never one another)."""

from __future__ import annotations

import csv
from pathlib import Path

NODE_FIELDS = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_FIELDS = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
]


def write_csv(path: Path, fields: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows(rows)
    return path


def synthetic(tmp_path: Path, n_pods: int = 120) -> tuple[Path, Path]:
    """A small cluster of four models and a churning workload that overflows it at times."""
    nodes = write_csv(
        tmp_path / "nodes.csv",
        NODE_FIELDS,
        [
            ["node-a", 96000, 393216, 8, "G2"],
            ["node-b", 32000, 131072, 4, "V100M16"],
            ["node-c", 104000, 524288, 2, "T4"],
            ["node-d", 104000, 524288, 2, "T4"],
            ["node-e", 16000, 122880, 2, "P100"],
        ],
    )
    rows: list[list[object]] = []
    milli = [1000, 810, 470, 320, 650, 230, 110, 1000, 50]
    specs = ["", "", "", "T4", "V100M16|V100M32", "G2", "P100|T4", ""]
    for i in range(n_pods):
        num = 0 if i % 17 == 0 else (2 if i % 23 == 0 else (4 if i % 41 == 0 else 1))
        gm = 0 if num == 0 else (1000 if num > 1 else milli[i % len(milli)])
        created = (i * 37) % 1000 + i // 3
        rows.append(
            [
                f"pod-{i:04d}",
                4000 + (i % 5) * 2000,
                8192 + (i % 3) * 4096,
                num,
                gm,
                specs[i % len(specs)],
                "LS" if i % 2 else "BE",
                "Running",
                created,
                created + 50 + (i * 53) % 700,
                created,
            ]
        )
    rows.append(["pod-zero", 1000, 1024, 1, 500, "", "BE", "Pending", 500, 500, ""])  # never present
    return nodes, write_csv(tmp_path / "pods.csv", POD_FIELDS, rows)
