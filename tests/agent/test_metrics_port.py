"""The plain HTTP metrics port (HAMI_PLACE_METRICS_PORT, the chart's `metrics` port): Prometheus
reads the cluster's figures computed from the watch cache, the process metrics and the counters;
nothing else is served there (the webhooks and the REST API stay behind TLS and authentication)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from testbed.agents.agent_set import AgentSet
from testbed.controlplane.waiting import wait_for

pytestmark = [pytest.mark.testbed]


def plain(port: int, path: str, data: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def test_metrics_port_serves_cluster_gauges_and_nothing_else(agents: AgentSet, ans: str, testbed: Any) -> None:
    port = agents.agent.metrics_port

    def scrape() -> str | None:
        code, body = plain(port, "/metrics")
        assert code == 200, body[:300]
        text = body.decode()
        return text if 'hami_place_gpus_whole_free{pool="all"}' in text else None

    text = wait_for("the per-pool gauges", scrape, 30)
    for line in (
        'hami_place_placements{phase="Pending"}',
        'hami_place_placements{phase="ScalingUp"}',
        'hami_place_gpus{pool="all"}',
        'hami_place_nodes_free{pool="all"}',
        "# TYPE hami_place_demand_room_pods gauge",
        "# TYPE hami_place_demand_pods gauge",
        'hami_place_cache_lists_total{resource="pods"}',
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "# TYPE hami_place_phase_seconds histogram",
        "# TYPE hami_place_move_seconds histogram",
        "# TYPE hami_place_certificate_reloads_total counter",
    ):
        assert line in text, line
    gpus = next(float(x.split()[-1]) for x in text.splitlines() if x.startswith('hami_place_gpus{pool="all"}'))
    assert gpus >= sum(n.gpus for n in testbed.nodes)  # the test bed's base nodes at least
    # The demand's room: every shape of the demand has a room figure in the pool and a wanted figure.
    wanted = [x for x in text.splitlines() if x.startswith("hami_place_demand_pods{")]
    room = [x for x in text.splitlines() if x.startswith('hami_place_demand_room_pods{pool="all"')]
    assert wanted and len(room) == len(wanted), (wanted, room)
    free_nodes = next(
        float(x.split()[-1]) for x in text.splitlines() if x.startswith('hami_place_nodes_free{pool="all"}')
    )
    assert 0 <= free_nodes <= len(testbed.nodes) + 100
    assert plain(port, "/healthz")[0] == 200 and plain(port, "/readyz")[0] == 200
    code, body = plain(port, "/api/v1/cluster-info")
    assert code == 404 and "not served on the metrics port" in json.loads(body)["message"]
    code, body = plain(port, "/validate", b"{}")
    assert code == 404 and "not served on this port" in json.loads(body)["message"]
