"""The chart's Grafana dashboard queries only what the agent exports: every metric name in every
panel and variable query is one the agent's registry produces (with the suffixes Prometheus adds),
and every label a query groups or filters by is one that metric carries."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "chart" / "dashboards" / "hami-place.json"
NAME = re.compile(r"\b((?:hami_place|process)_[a-z0-9_]+)\b")
# `by (a, b)` and `name{a="x", b=~"y"}` (Grafana's own $variables and `le` are not labels of ours)
BY = re.compile(r"\bby \(([^)]*)\)")
SELECTOR = re.compile(r"\b((?:hami_place|process)_[a-z0-9_]+)\{([^}]*)\}")


def exported() -> dict[str, set[str]]:
    """Sample name -> its label names, as the agent's /metrics would expose them."""
    out: dict[str, set[str]] = {}
    for family in metrics.REGISTRY.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
        if not family.samples:  # a family with no sample yet: its declared labels
            labels = set(getattr(family, "_labelnames", ()) or ())
        for suffix in suffixes:
            out[family.name + suffix] = labels
    # the labelled metrics that have no sample until something happens: their declared label names
    for collector in list(metrics.REGISTRY._collector_to_names):
        names = getattr(collector, "_labelnames", None)
        base = getattr(collector, "_name", None)
        if names and base:
            for key in list(out):
                if key == base or key.startswith(base + "_"):
                    out[key] |= set(names)
    return out


def queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in doc["templating"]["list"] if v.get("type") == "query"]
    return exprs


def test_every_query_names_an_exported_metric_with_its_labels() -> None:
    have = exported()
    assert {"hami_place_gpus_whole_free", "hami_place_placements", "process_cpu_seconds_total"} <= set(have)
    exprs = queries()
    assert len(exprs) >= 15
    for expr in exprs:
        names = NAME.findall(expr)
        assert names, expr
        for name in names:
            assert name in have, f"{name} (in {expr!r}) is not exported by the agent"
        for name, inner in SELECTOR.findall(expr):
            for label in re.findall(r"([a-z_]+)\s*=~?", inner):
                assert label == "job" or label in have[name], f"{name} has no label {label!r} ({expr})"
        for group in BY.findall(expr):
            for label in (x.strip() for x in group.split(",")):
                if label in ("le", ""):
                    continue
                assert any(label in have[n] for n in names), f"no metric in {expr!r} has label {label!r}"


def test_the_chart_ships_the_dashboard_it_renders() -> None:
    template = (DASHBOARD.parents[1] / "templates" / "dashboard.yaml").read_text()
    assert '.Files.Get "dashboards/hami-place.json"' in template
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "hami-place" and len({p["id"] for p in doc["panels"]}) == len(doc["panels"])


def test_every_metric_is_in_the_reference() -> None:
    reference = (DASHBOARD.parents[2] / "docs" / "agent.md").read_text().split("## Metrics", 1)[1]
    families = {f.name for f in metrics.REGISTRY.collect() if f.name.startswith("hami_place_")}
    missing = [name for name in sorted(families) if f"`{name}`" not in reference and f"`{name}_total`" not in reference]
    assert missing == [], f"document these metrics in docs/agent.md (## Metrics): {missing}"
