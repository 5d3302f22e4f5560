"""Prometheus metrics of the agent, in their own registry (served at /metrics, and on the plain
HTTP metrics port when HAMI_PLACE_METRICS_PORT is set).

Counters and histograms are updated where things happen; the cluster's figures (placements by
phase, whole free GPUs, stranded capacity and FGD per node pool, the cache's lists) are computed
from the watch cache when Prometheus scrapes (:class:`ClusterCollector`), so they are never stale
and cost nothing between scrapes. docs/agent.md has the reference; the chart's Grafana dashboard
queries only these names (tests/chart/test_dashboard.py)."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from hami_place_core import capacity
from hami_place_core.pending import pending_gpu_pods

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, ...

ADMISSION_SECONDS = Histogram(
    "hami_place_admission_seconds",
    "Time to answer an AdmissionReview, by webhook and outcome.",
    ["webhook", "outcome"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
# The handlers' observers, looked up once: labels() takes a lock and builds a key on every call,
# and the mutating webhook answers thousands of reviews a second.
OBSERVE_ADMISSION = {
    (webhook, outcome): ADMISSION_SECONDS.labels(webhook=webhook, outcome=outcome).observe
    for webhook, outcomes in (("mutate", ("patched", "unchanged")), ("validate", ("allowed", "denied")))
    for outcome in outcomes
}
CLAIMS = Counter("hami_place_claims_total", "Placements claimed by a pod at admission.", registry=REGISTRY)
CLAIM_CONFLICTS = Counter(
    "hami_place_claim_conflicts_total", "Claims lost to a concurrent writer (HTTP 409).", registry=REGISTRY
)
LEASE_EXPIRIES = Counter(
    "hami_place_claim_lease_expiries_total", "Claims whose pod never appeared, returned to Pending.", registry=REGISTRY
)
TRANSITIONS = Counter(
    "hami_place_phase_transitions_total",
    "Placement phase transitions written by the agent.",
    ["phase"],
    registry=REGISTRY,
)
EVICTIONS = Counter(
    "hami_place_evictions_total",
    "Eviction API calls, by result (accepted, blocked by a PDB).",
    ["result"],
    registry=REGISTRY,
)
MOVES = Counter(
    "hami_place_moves_total", "Move steps reached (evicted, completed, failed).", ["step"], registry=REGISTRY
)
LEADER = Gauge("hami_place_leader", "1 while this replica holds the controller lease.", registry=REGISTRY)
ERRORS = Counter("hami_place_errors_total", "Errors, by kind.", ["kind"], registry=REGISTRY)
# agent/loop_lag.py: how late the event loop woke (work held it); webhooks answer on that loop.
LOOP_LAG = Histogram(
    "hami_place_event_loop_lag_seconds",
    "How much later than asked the agent's event loop woke (a stall delays every webhook answer).",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
LOOP_LAG_MAX = Gauge(
    "hami_place_event_loop_lag_max_seconds", "The worst event-loop lag since the agent started.", registry=REGISTRY
)


_worst_lag = [0.0]


def record_loop_lag(seconds: float) -> None:
    LOOP_LAG.observe(seconds)
    if seconds > _worst_lag[0]:
        _worst_lag[0] = seconds
        LOOP_LAG_MAX.set(seconds)


def worst_loop_lag() -> float:
    return _worst_lag[0]


CERT_RELOADS = Counter(
    "hami_place_certificate_reloads_total",
    "Serving certificate / webhook client CA files that changed: reloaded, or failed (previous kept).",
    ["result"],
    registry=REGISTRY,
)
CACHE_SYNCED = Gauge(
    "hami_place_cache_synced", "1 when the informer has finished its first list.", ["resource"], registry=REGISTRY
)
PHASE_SECONDS = Histogram(
    "hami_place_phase_seconds",
    "Time a placement spent in a phase before leaving it, as this replica saw it (a move's steps: "
    "Evicting, Claimed, ScalingUp, ...).",
    ["phase"],
    registry=REGISTRY,
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
MOVE_SECONDS = Histogram(
    "hami_place_move_seconds",
    "A move from its start (moveStartedAt) to its end, by result (Completed, Failed, Cancelled).",
    ["result"],
    registry=REGISTRY,
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
AUTOPILOT_EVALUATIONS = Counter(
    "hami_place_autopilot_evaluations_total",
    "Evaluations of HamiDefragPolicies, by policy and outcome (idle, planned, invalid, error).",
    ["policy", "result"],
    registry=REGISTRY,
)
AUTOPILOT_MOVES = Counter(
    "hami_place_autopilot_moves_total",
    "Moves the autopilot started, and how they ended (started, succeeded, failed), by policy.",
    ["policy", "result"],
    registry=REGISTRY,
)
AUTOPILOT_PLAN_MOVES = Gauge(
    "hami_place_autopilot_plan_moves",
    "Moves in each policy's current plan (0: nothing to do or no plan).",
    ["policy"],
    registry=REGISTRY,
)


class ClusterCollector:
    """The cluster's figures from the agent's watch cache, computed at scrape time (at most once
    per `min_interval` seconds: a scrape of a 5,000-node cluster must not cost a planner run)."""

    def __init__(self, min_interval: float = 10.0) -> None:
        self.cache: Any = None
        self.pool_label = ""
        self.min_interval = min_interval
        self._memo: tuple[float, list[Metric]] | None = None

    def attach(self, cache: Any, pool_label: str) -> None:
        self.cache, self.pool_label, self._memo = cache, pool_label, None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        if self._memo is None or now - self._memo[0] >= self.min_interval:
            self._memo = (now, self._families())
        return iter(self._memo[1])

    def _families(self) -> list[Metric]:
        from hami_place_core import placement as hp

        phases = GaugeMetricFamily("hami_place_placements", "Placements in the cache, by phase.", labels=["phase"])
        lists = CounterMetricFamily(
            "hami_place_cache_lists",
            "Full lists done by the watch cache since start (the first, then one per 410 Gone).",
            labels=["resource"],
        )
        pools = [
            GaugeMetricFamily(name, text, labels=["pool"])
            for name, text in (
                ("hami_place_gpus_whole_free", "GPUs that can take a whole-GPU request now, per node pool."),
                ("hami_place_gpus_stranded", "Free GPU capacity no whole-GPU request can use, in GPUs, per node pool."),
                (
                    "hami_place_fgd_gpus",
                    "Fragmentation (FGD) in GPUs the current workload mix cannot use, per node pool.",
                ),
                ("hami_place_gpus", "GPUs registered by HAMi, per node pool."),
            )
        ]
        capacity = [
            GaugeMetricFamily(name, text, labels=labels)
            for name, text, labels in (
                (
                    "hami_place_nodes_free",
                    "Completely free GPU nodes (every GPU healthy, uncordoned and unused), per node pool.",
                    ["pool"],
                ),
                (
                    "hami_place_demand_room_pods",
                    "Pods of each shape of the demand that fit at once, per node pool (shape: GPUs per pod, "
                    "and the share of each when it is not a whole GPU).",
                    ["pool", "shape"],
                ),
                (
                    "hami_place_demand_pods",
                    "Pods of each shape the demand asks for: the pending GPU pods, else the running mix (source).",
                    ["shape", "source"],
                ),
            )
        ]
        if self.cache is not None:
            counted = Tally(str(p.phase) for p in self.cache.all_placements())
            for phase in hp.Phase:
                phases.add_metric([str(phase)], counted.get(str(phase), 0))
            for inf in self.cache.sync_status():
                lists.add_metric([inf.name], inf.relists)
            if self.cache.ready:
                for pool, row in self._pools().items():
                    for family, value in zip(pools, row, strict=True):
                        family.add_metric([pool], value)
                self._capacity(*capacity)
        return [phases, lists, *pools, *capacity]

    def _pool_of(self, node: Any) -> str:
        return (node.labels.get(self.pool_label, "") or "none") if self.pool_label else "all"

    def _capacity(self, free: GaugeMetricFamily, room: GaugeMetricFamily, wanted: GaugeMetricFamily) -> None:
        """Free nodes and the demand's room (hami_place_core/capacity.py) per pool."""
        state = self.cache.state
        now = dt.datetime.now(dt.UTC)
        waiting = [p.pod for p in pending_gpu_pods(self.cache.pods_by_key().values(), now, 0)]
        demand = capacity.choose_demand(state, waiting)
        # Each shape is a label value: a cluster whose pending pods ask for many odd shares must
        # not flood the time series.
        items = demand.items[: capacity.MAX_SHAPES_SHOWN]
        shown = capacity.Demand(items, demand.source)
        found = capacity.room(state, shown, group_of=self._pool_of)
        for pool, (free_nodes, _, pods) in sorted(found.groups.items()):
            free.add_metric([pool], free_nodes)
            for item, n in zip(items, pods, strict=True):
                room.add_metric([pool, item.shape], n)
        for item in items:
            wanted.add_metric([item.shape, shown.source], item.count)

    def _pools(self) -> dict[str, tuple[float, float, float, float]]:
        from hami_place_core.fragmentation import cluster_metrics, mix_from_state

        state = self.cache.state
        per_node = cluster_metrics(state, mix_from_state(state)).nodes
        out: dict[str, list[float]] = {}
        for name, m in per_node.items():
            node = state.nodes.get(name)
            labels = node.labels if node is not None else {}
            pool = labels.get(self.pool_label, "") if self.pool_label else "all"
            row = out.setdefault(pool or "none", [0.0, 0.0, 0.0, 0.0])
            row[0] += m.whole_free
            row[1] += m.stranded
            row[2] += m.fgd
            row[3] += m.gpus
        return {pool: (row[0], round(row[1], 4), round(row[2], 4), row[3]) for pool, row in out.items()}


CLUSTER = ClusterCollector()
REGISTRY.register(CLUSTER)  # a custom collector: describe() and collect()
