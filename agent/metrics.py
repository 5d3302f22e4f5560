"""Prometheus metrics of the agent, in their own registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

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
CERT_RELOADS = Counter(
    "hami_place_certificate_reloads_total",
    "Serving certificate / webhook client CA files that changed: reloaded, or failed (previous kept).",
    ["result"],
    registry=REGISTRY,
)
CACHE_SYNCED = Gauge(
    "hami_place_cache_synced", "1 when the informer has finished its first list.", ["resource"], registry=REGISTRY
)
CACHE_LISTS = Gauge(
    "hami_place_cache_lists",
    "Full lists done by the watch cache since start (the first, then one per 410 Gone).",
    ["resource"],
    registry=REGISTRY,
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
