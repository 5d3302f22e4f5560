"""Seeded hostile values for HAMi's annotations: what a tenant who may annotate a pod, or anyone who
may write a node, could put there. Shared by the pure-logic fuzz suite (tests/unit) and the test-bed
one (tests/agent), so both drive the same cases; a failure names its seed and case number, and
``FUZZ_SEED=<seed>`` replays it.

The values cover what the issue lists: sizes (thousands of entries, 400-digit numbers, the int32
and uint64 boundaries), signs, digits of other scripts and Go-invalid number forms (``1_0``, ``+5``,
``0x10``, ``1e3``, spaces), unicode everywhere, duplicates (index and UUID), wrong types, nesting,
truncation, and plain garbage; a share of the cases is valid so the mix also exercises the paths
that compute.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from hami_place_core import annotations as ann

# Number spellings a decoder must refuse or read exactly as Go's strconv.ParseInt does.
HOSTILE_NUMBERS = (
    "-1",
    "-2147483648",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "18446744073709551616",
    "9" * 400,
    "-" + "9" * 400,
    "١٠",  # Arabic-Indic digits: Python's int() reads 10, Go refuses
    "１０",  # fullwidth digits
    "1_0",
    "+5",
    " 5",
    "5 ",
    "0x10",
    "1e3",
    "1.5",
    "NaN",
    "",
    "00012",
    "-0",
    "\u0000",
    "5\n",
)
UNICODE = ("GPU-ü", "GPU-\u202e", "ＧＰＵ", "GPU-😀", "GPU-\u0000x", "GPU-" + "x" * 300, "", " ", "GPU-,:;")


@dataclass
class Case:
    """One node register and the allocations of the pods on that node."""

    register: str
    allocations: list[str]
    uuids: list[str]


class Fuzzer:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets

    # ---- scalars --------------------------------------------------------------------------------
    def text_number(self) -> str:
        r = self.rng.random()
        if r < 0.45:
            return str(self.rng.choice((0, 1, 10, 100, 1024, 15360, 81920)))
        if r < 0.9:
            return self.rng.choice(HOSTILE_NUMBERS)
        return str(self.rng.randint(-(2**40), 2**40))

    def json_number(self) -> Any:
        r = self.rng.random()
        if r < 0.5:
            return self.rng.choice((0, 1, 4, 10, 100, 15360, 81920))
        return self.rng.choice(
            (
                -1,
                2**31 - 1,
                2**31,
                -(2**31) - 1,
                2**63,
                2**64,
                10**400,
                -(10**400),
                1.5,
                1e3,
                1e308,
                "10",
                "١٠",
                None,
                True,
                [1],
                {"n": 1},
            )
        )

    def uuid(self, i: int) -> str:
        if self.rng.random() < 0.85:
            return f"GPU-fz{self.seed}-{i:04d}"
        return self.rng.choice(UNICODE)

    # ---- node register ---------------------------------------------------------------------------
    def register(self) -> tuple[str, list[str]]:
        """A register annotation value and the UUIDs it names (for the pods to allocate on)."""
        r = self.rng.random()
        n = self.rng.choice((0, 1, 2, 4, 8)) if self.rng.random() < 0.95 else self.rng.choice((300, 3000))
        uuids = [self.uuid(i) for i in range(n)]
        if r < 0.55:
            return self._json_register(uuids), uuids
        if r < 0.8:
            return self._legacy_register(uuids), uuids
        return self._garbage(), uuids

    def _json_register(self, uuids: list[str]) -> str:
        entries: list[Any] = []
        for i, uuid in enumerate(uuids):
            entry: dict[str, Any] = {
                "id": uuid,
                "index": i,
                "count": 10,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA-A100",
                "health": True,
            }
            for _ in range(self.rng.choice((0, 0, 1, 2))):
                key = self.rng.choice(("index", "count", "devmem", "devcore", "numa", "id", "health", "type", "mode"))
                entry[key] = self.json_number() if key not in ("id", "type", "mode") else self.rng.choice(UNICODE)
            if self.rng.random() < 0.05:
                entry["index"] = 0  # duplicate index
            if self.rng.random() < 0.05:
                entry = {k.upper(): v for k, v in entry.items()}  # Go's json matches keys case-insensitively
            entries.append(entry if self.rng.random() > 0.02 else self.rng.choice(("x", None, 5, [])))
        if uuids and self.rng.random() < 0.05:
            entries.append(dict(entries[0]) if isinstance(entries[0], dict) else {"id": uuids[0]})  # duplicate UUID
        text = json.dumps(entries, ensure_ascii=self.rng.random() < 0.5)
        if self.rng.random() < 0.05:
            text = text[: self.rng.randint(0, len(text))]  # truncated
        return text

    def _legacy_register(self, uuids: list[str]) -> str:
        parts = []
        for i, uuid in enumerate(uuids):
            fields = [uuid, "10", "81920", "100", "NVIDIA-A100", "0", "true", str(i), "hami-core"]
            for _ in range(self.rng.choice((0, 0, 1, 2))):
                k = self.rng.randrange(1, 8)
                fields[k] = self.text_number() if k != 6 else self.rng.choice(("yes", "TRUE", "t", "1", ""))
            if self.rng.random() < 0.1:
                fields = fields[: self.rng.choice((3, 7, 8))]
            parts.append(",".join(fields) + ":")
        return "".join(parts)

    def _garbage(self) -> str:
        return self.rng.choice(
            (
                "[" * 5000,
                "[{" * 100,
                '{"id":"x"}',
                "null",
                "[null]",
                "[]",
                "::::",
                ",,,,:",
                "\u0000",
                "😀" * 100,
                json.dumps([{"id": "GPU-x", "devmem": 10**400}]),
                "[" + ",".join(["{}"] * 2000) + "]",
            )
        )

    # ---- pod allocation --------------------------------------------------------------------------
    def allocation(self, uuids: list[str]) -> str:
        """A hami.io/vgpu-devices-allocated value naming (mostly) the node's UUIDs."""
        r = self.rng.random()
        if r < 0.05:
            return self._garbage()
        n_entries = self.rng.choice((1, 1, 2, 4)) if r < 0.97 else 3000
        entries = []
        for _ in range(n_entries):
            uuid = self.rng.choice(uuids) if uuids and self.rng.random() < 0.9 else self.uuid(9999)
            mem = "4096" if self.rng.random() < 0.6 else self.text_number()
            cores = "30" if self.rng.random() < 0.6 else self.text_number()
            fields = [uuid, ann.NVIDIA_DEVICE_TYPE, mem, cores]
            if self.rng.random() < 0.05:
                fields = fields[: self.rng.choice((1, 2, 3))]
            entries.append(",".join(fields) + ":")
        containers = self.rng.choice((1, 1, 2))
        cut = len(entries) // containers
        return "".join("".join(entries[i * cut : (i + 1) * cut]) + ";" for i in range(containers))

    def case(self, pods: int) -> Case:
        register, uuids = self.register()
        return Case(register, [self.allocation(uuids) for _ in range(pods)], uuids)
