"""Seeded fuzz of HamiDefragPolicy: a valid policy mutated field by field with hostile values
(other scripts' digits, huge and negative numbers, floats, bools, nulls, lists, objects, long
strings, white space, control characters, NaN), read by parse_policy and judged by the policy
webhook, as an AdmissionReview built the way the API server sends it.

parse_policy must return a Policy or raise PolicyError, nothing else (issue 39: "0 ² * * *", a
300-character timeZone and a label key with a space each answered 500 or were admitted); what it
returns must be usable: budget_wait and Window.state run for any `now`, with a bounded number of
cron searches. The webhook must never answer 500 or log a traceback.

``FUZZ_SEED=<n>`` replays one seed (the failure message names it and the case)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import logging
import os
import random
from typing import Any

import pytest

from agent import metrics
from agent.admission import parse_review
from agent.errors import InvalidRequest
from agent.validate_policy import PolicyValidator
from hami_place_core import defrag_policy as dp
from hami_place_core.schedule import Cron, Window

SEEDS = [int(os.environ["FUZZ_SEED"])] if os.environ.get("FUZZ_SEED") else [39, 40, 41, 42]
CASES = 600  # policies per seed

VALID: dict[str, Any] = {
    "apiVersion": dp.API_VERSION,
    "kind": dp.KIND,
    "metadata": {"name": "fuzz", "generation": 1},
    "spec": {
        "mode": "Apply",
        "suspend": False,
        "triggers": {"pendingPods": {"after": "2m"}, "freeGPUs": {"below": 3}},
        "window": {"schedule": "0 1 * * *", "duration": "4h", "timeZone": "Europe/Berlin"},
        "minInterval": "2m",
        "budgets": {"movesPerRun": 5, "movesPerHour": 4, "movesPerNode": 2, "movesPerWorkload": 1},
        "selector": {
            "namespaces": ["ml", "batch"],
            "podSelector": {
                "matchLabels": {"tier": "batch"},
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}],
            },
            "maxPriority": 1000,
        },
        "nodeSelector": {"matchLabels": {"pool": "a100"}},
        "moveStrategy": "Evict",
    },
}

# Every field parse_policy reads ...
FIELDS: tuple[tuple[str, ...], ...] = (
    ("spec", "mode"),
    ("spec", "suspend"),
    ("spec", "triggers", "pendingPods", "after"),
    ("spec", "triggers", "freeGPUs", "below"),
    ("spec", "window", "schedule"),
    ("spec", "window", "duration"),
    ("spec", "window", "timeZone"),
    ("spec", "minInterval"),
    ("spec", "budgets", "movesPerRun"),
    ("spec", "budgets", "movesPerHour"),
    ("spec", "budgets", "movesPerNode"),
    ("spec", "budgets", "movesPerWorkload"),
    ("spec", "selector", "namespaces"),
    ("spec", "selector", "podSelector", "matchLabels"),
    ("spec", "selector", "podSelector", "matchExpressions"),
    ("spec", "selector", "maxPriority"),
    ("spec", "nodeSelector", "matchLabels"),
    ("spec", "nodeSelector", "matchExpressions"),
    ("spec", "moveStrategy"),
    ("metadata", "name"),
)
# ... and the objects that hold them (mutated less often: one bad object hides every field in it).
OBJECTS: tuple[tuple[str, ...], ...] = (
    ("spec",),
    ("metadata",),
    ("spec", "triggers"),
    ("spec", "triggers", "pendingPods"),
    ("spec", "triggers", "freeGPUs"),
    ("spec", "window"),
    ("spec", "budgets"),
    ("spec", "selector"),
    ("spec", "selector", "podSelector"),
    ("spec", "nodeSelector"),
)

DIGITS = ("²", "٢", "６", "٠ ٢ * * *", "0 ² * * *", "*/² * * * *", "²h", "٢m", "６s", "1h３0m", "１", "𝟐")
NUMBERS = (0, 1, -1, -5, 3, 63, 1000, 1001, 10_000, 100_001, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 10**30, 10**400)
FLOATS = (1.5, 0.0, -0.5, 1e308, float("nan"), float("inf"), float("-inf"))
TEXTS = (
    "",
    " ",
    "\t",
    "\n",
    " 5m ",
    "\u2003",
    "0\u20032 * * *",
    "\x00",
    "5m\x00",
    "\x1c",
    "Europe/Berlin\x00",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "1e400",
    "NaN",
    ".",
    "-5m",
    "9" * 31 + "h",
    "9" * 5000,
    "x" * 300,
    "y" * 100_000,
    "Europe/" + "A" * 300,
    "../../etc/passwd",
    "/etc/localtime",
    "Europe/../UTC",
    "a b",
    "Example.com/x",
    "DryRun",
    "Apply",
    "Surge",
    "Auto",
    "evict",
)
NEAR_VALID = (
    "0 2 * * *",
    "* * * * *",
    "*/5 * * * MON-FRI",
    "0 0 29 2 *",
    "0 0 30 2 *",
    "59 23 31 12 *",
    "1m",
    "168h",
    "168h1m",
    "8784h",
    "8785h",
    "90s",
    "0s",
    "250ms",
    "1.5h",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/New_York",
    "Pacific/Chatham",
    "UTC",
    "Etc/GMT+5",
    ["ml"],
    ["ml", "ml"],
    ["ML"],
    ["a" * 64],
    [""],
    ["ml", 5],
    ["kube-system"] * 300,
    {"matchLabels": {"app": "web"}},
    {"matchLabels": {"a b": "web"}},
    {"matchLabels": {"app": "a b"}},
    {"matchLabels": {"app": 5}},
    {"matchLabels": {"example.com/" + "n" * 63: "v" * 63}},
    {"matchLabels": {"/app": "web"}},
    {"matchLabels": {f"k{i}": "v" for i in range(65)}},
    {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    {"matchExpressions": [{"key": ["app"], "operator": "Exists"}]},
    {"matchExpressions": [{"key": {"a": 1}, "operator": "In", "values": ["x"]}]},
    {"matchExpressions": [{"key": "app", "operator": "In", "values": "web"}]},
    {"matchExpressions": [{"key": "app", "operator": "In", "values": [1]}]},
    {"matchExpressions": [{"key": "app", "operator": ["In"], "values": ["x"]}]},
    {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": [None]},
    {"matchExpressions": "app in (web)"},
    [{"key": "app", "operator": "DoesNotExist"}],
    {"pendingPods": {"after": "5m"}},
    {"freeGPUs": {"below": 1}},
    {"schedule": "0 2 * * *", "duration": "1h"},
    {"movesPerRun": 0},
)


# Values each field accepts, so that many mutated policies are read and then used.
GOOD: dict[str, tuple[Any, ...]] = {
    "mode": ("DryRun", "Apply", None),
    "suspend": (True, False, None),
    "after": ("90s", "1.5h", "8784h", ".5h", "0s", "250ms"),
    "below": (1, 100_000),
    "schedule": ("* * * * *", "*/5 * * * MON-FRI", "0 0 29 2 *", "30 2 * * *", "0,30 1-3 * JAN,mar *", "0 0 1 * MON"),
    "duration": ("1m", "168h", "90m", "2.5h", "1h1m1s"),
    "timeZone": ("Europe/Berlin", "Australia/Lord_Howe", "America/New_York", "Pacific/Chatham", "UTC", None),
    "minInterval": ("0s", "8784h", "1h30m", None),
    "movesPerRun": (0, 1000, None),
    "movesPerHour": (0, 10_000, None),
    "movesPerNode": (0, 1000),
    "movesPerWorkload": (0, 1000),
    "namespaces": (["ml"], ["a" * 63, "b-1"]),
    "maxPriority": (-(2**31), 2**31 - 1, 0),
    "matchLabels": ({"app": "web", "example.com/" + "n" * 63: ""},),
    "matchExpressions": ([{"key": "example.com/pool", "operator": "NotIn", "values": ["", "a"]}],),
    "nodeSelector": (None, {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}),
    "moveStrategy": ("Surge", "Auto", None),
}


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def value_for(rng: random.Random, key: str) -> Any:
    """A value the field accepts (two times in five), else a hostile one."""
    if key in GOOD and rng.random() < 0.4:
        return copy.deepcopy(rng.choice(GOOD[key]))
    return hostile(rng)


def hostile(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(DIGITS)
    if roll < 0.3:
        return rng.choice(NUMBERS)
    if roll < 0.38:
        return rng.choice(FLOATS)
    if roll < 0.45:
        return rng.choice([True, False, None])
    if roll < 0.5:
        return rng.choice([[], [None], [[]], {}, {"a": {"b": {}}}, _deep(300)])
    if roll < 0.7:
        return rng.choice(TEXTS)
    return copy.deepcopy(rng.choice(NEAR_VALID))


def mutated(rng: random.Random) -> dict[str, Any]:
    obj = copy.deepcopy(VALID)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        path = rng.choice(OBJECTS if rng.random() < 0.15 else FIELDS)
        parent: Any = obj
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue  # an earlier mutation replaced the object that held it
        if rng.random() < 0.1:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value_for(rng, path[-1])
    return obj


NOWS = (
    dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 3, 29, 1, 0, 30, tzinfo=dt.UTC),  # Berlin's clocks jump an hour
    dt.datetime(2026, 4, 4, 15, 10, tzinfo=dt.UTC),  # Lord Howe's go back half an hour
    dt.datetime(2026, 11, 1, 6, 30, tzinfo=dt.UTC),  # New York's go back an hour
    dt.datetime(2099, 3, 1, tzinfo=dt.UTC),
)
STATUS = {
    "recentMoves": [
        {"pod": "ml/a", "startedAt": "2026-12-06T11:58:00Z", "result": "Succeeded"},
        {"pod": "ml/b", "startedAt": "9999-12-31T23:59:59Z"},
        {"pod": "ml/c", "startedAt": "9999-12-31T23:59:59-12:00"},
        {"pod": "ml/d", "startedAt": "0001-01-01T00:00:00+14:00"},
        {"pod": "ml/e", "startedAt": "0001-01-01T00:00:00Z"},
    ]
}
# Window.state makes one backward and one forward cron search per stretch of constant UTC offset
# (one or two in a week), then one more: a bound on its work whatever the expression and duration.
MAX_SEARCHES = 8


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    for name in ("next_after", "prev_at_or_before"):
        original = getattr(Cron, name)

        def counted(cron: Cron, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            count[0] += 1
            return _original(cron, *args, **kwargs)

        monkeypatch.setattr(Cron, name, counted)
    return count


def use(policy: dp.Policy, searches: list[int], where: str) -> None:
    """Everything the autopilot does with a policy it has read."""
    moves = dp.recent_moves(STATUS)
    pod = {"metadata": {"namespace": "ml", "labels": {"tier": "batch", "app": "train"}}, "spec": {"priority": 7}}
    policy.selects_pod(pod)
    policy.selects_node({"pool": "a100"})
    for now in NOWS:
        dp.budget_wait(policy, moves, now)
        dp.budget_wait(policy, moves[:1], now)
        if policy.window is not None:
            before = searches[0]
            _, when = policy.window.state(now)
            assert searches[0] - before <= MAX_SEARCHES, (where, policy.window, now, searches[0] - before)
            assert when is None or when.tzinfo is not None


@pytest.mark.parametrize("seed", SEEDS)
def test_parse_policy_returns_a_usable_policy_or_a_policy_error(seed: int, searches: list[int]) -> None:
    rng = random.Random(seed)  # noqa: S311 - a reproducible fuzz, not a secret
    seen = {"policy": 0, "refused": 0, "window": 0}
    for case in range(CASES):
        obj = mutated(rng)
        where = f"FUZZ_SEED={seed} case {case}"
        try:
            policy = dp.parse_policy(obj)
        except dp.PolicyError as e:
            assert len(str(e)) < 1000, (where, str(e)[:200])  # messages quote a value, not all of it
            seen["refused"] += 1
            continue
        except Exception as e:  # the point: nothing else may escape  # noqa: BLE001
            pytest.fail(f"{where}: {type(e).__name__}: {e}"[:2000])
        seen["policy"] += 1
        seen["window"] += policy.window is not None
        use(policy, searches, where)
    # the mutations reach both outcomes, and windows are exercised
    assert seen["policy"] > CASES // 5 and seen["refused"] > CASES // 3 and seen["window"] > CASES // 10, seen


class FakeKube:
    """The only API call the policy webhook makes: SubjectAccessReviews, answered at random."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    async def request(self, method: str, path: str, query: Any = None, body: Any = None) -> dict[str, Any]:
        assert path.endswith("/subjectaccessreviews"), path
        return {"status": {"allowed": self.rng.random() < 0.8, "reason": "fuzz"}}


def review_bytes(operation: str, obj: Any, old: Any, rng: random.Random) -> bytes:
    request = {
        "uid": f"u-{rng.randrange(10**9)}",
        "kind": {"group": dp.GROUP, "version": dp.VERSION, "kind": dp.KIND},
        "resource": {"group": dp.GROUP, "version": dp.VERSION, "resource": dp.PLURAL},
        "name": "fuzz",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def _errors() -> float:
    return metrics.REGISTRY.get_sample_value("hami_place_errors_total", {"kind": "validate"}) or 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_the_policy_webhook_never_answers_500(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(seed + 1000)  # noqa: S311 - a reproducible fuzz, not a secret

    async def run() -> dict[int, int]:
        validator = PolicyValidator(FakeKube(rng))  # type: ignore[arg-type]
        codes: dict[int, int] = {}
        for case in range(CASES):
            obj = mutated(rng)
            operation, old = "CREATE", None
            if rng.random() < 0.2:
                operation, old = "UPDATE", (copy.deepcopy(obj) if rng.random() < 0.3 else mutated(rng))
            try:
                review = parse_review(review_bytes(operation, obj, old, rng))
            except InvalidRequest:
                continue  # NaN, or an integer beyond 64 bits: refused as JSON before any webhook logic (400)
            verdict = await validator.review(review)
            assert verdict.code != 500, (f"FUZZ_SEED={seed} case {case}", verdict.message[:500])
            if operation == "CREATE":
                refused = _refused(review.obj)
                assert (verdict.code == 422) == refused, (f"FUZZ_SEED={seed} case {case}", verdict)
            codes[verdict.code] = codes.get(verdict.code, 0) + 1
        return codes

    before = _errors()
    with caplog.at_level(logging.WARNING):
        codes = asyncio.run(run())
    assert _errors() == before, "a review took the policy webhook's internal-error path"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert codes.get(422, 0) > CASES // 3 and codes.get(0, 0) > CASES // 10 and codes.get(403, 0) > 0, codes


def _refused(obj: dict[str, Any]) -> bool:
    try:
        dp.parse_policy(obj)
    except dp.PolicyError:
        return True
    return False


def test_an_update_nested_too_deep_to_compare_is_judged_not_crashed() -> None:
    """orjson reads 1,024 levels of nesting; Python's == gives up near 1,000 (RecursionError)."""
    deep = b"[" * 1000 + b"1" + b"]" * 1000
    spec = b'{"triggers": {"pendingPods": {"after": "2m"}}, "selector": {"namespaces": ["ml"]}, "x": ' + deep + b"}"
    obj = b'{"metadata": {"name": "deep"}, "spec": ' + spec + b"}"
    body = (
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "name": "deep", '
        b'"operation": "UPDATE", "userInfo": {"username": "alice"}, "object": ' + obj + b', "oldObject": ' + obj + b"}}"
    )
    review = parse_review(body)
    verdict = asyncio.run(PolicyValidator(FakeKube(random.Random(0))).review(review))  # type: ignore[arg-type]  # noqa: S311
    assert verdict.code != 500, verdict.message


def test_the_fuzzed_policy_is_valid_before_its_mutations() -> None:
    p = dp.parse_policy(VALID)
    assert isinstance(p.window, Window) and p.namespaces == {"ml", "batch"}
