"""The webhook benchmark's report (bench/webhook_bench.py): the Markdown tables from its results, each
row against the issue's targets, and the hottest functions of a py-spy profile."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from bench.webhook_load import REPO

# Targets from the issue; each row reports its ratio to the target.
TARGET_NOMATCH_RPS = 8000.0
TARGET_NOMATCH_P99_MS = 3.0
TARGET_MATCH_P99_MS = 20.0
TARGET_POD_OVERHEAD = 1.10


def _frame(frame: str) -> str:
    """'name (/abs/path/file.py:123)' -> 'name (pkg/file.py)'."""
    name, sep, loc = frame.partition(" (")
    if not sep:
        return frame
    path = loc.rstrip(")").rsplit(":", 1)[0]
    for prefix in (str(REPO) + "/", "site-packages/", "lib/python3."):
        if prefix in path:
            path = path.split(prefix, 1)[1]
    return f"{name} ({path})"


def summarize_profile(path: Path, top: int = 15) -> dict[str, Any]:
    """py-spy raw (collapsed) stacks -> self and inclusive shares per function, in % of samples
    (py-spy samples only a thread that is running, so these are shares of the busy time)."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [_frame(f) for f in stack.split(";")]
        total += int(n)
        self_c[frames[-1]] += int(n)
        for f in set(frames):
            incl[f] += int(n)

    def share(c: int) -> float:
        return round(100 * c / max(1, total), 1)

    return {
        "samples": total,
        "self": [(k, share(v)) for k, v in self_c.most_common(top)],
        "inclusive": [(k, share(v)) for k, v in incl.most_common(top * 2)],
    }


# ---- report -------------------------------------------------------------------------------------------
def _ms(d: dict[str, Any], key: str) -> str:
    return f"{d[key]:.2f}"


def _per_core(run: dict[str, Any], proc: str) -> float:
    """Answers per CPU-second of the server process."""
    return float(run["rps"]) / max(0.01, float(run["cpu"].get(proc, 0.0)))


def _load(cpu: dict[str, float]) -> str:
    """Flag a measurement that shared the machine with other work."""
    other = cpu.get("other", 0.0)
    return f"; CPU outside the benchmark: {other:.2f} cores" if other >= 0.25 else ""


def report(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory']}, Linux {m['kernel']}, "
        f"Python {m['python']}, Sanic {m['sanic']}, {m['wrk']}; hami-place {m.get('commit', '?')}",
        f"AdmissionReview size: {results.get('review_bytes', '?')} bytes (compact JSON, as the apiserver sends)",
        "",
        "| measurement | result | target | ratio |",
        "|---|---|---|---|",
    ]
    nm = results.get("nomatch", [])
    by = {(r["label"], r["connections"]): r for r in nm}
    main_c = results["args"]["connections"]
    for c in sorted({r["connections"] for r in nm}):
        ag, bare = by.get(("agent", c)), by.get(("bare", c))
        if not ag or not bare:
            continue
        # per busy core: robust against other work on the machine, which steals CPU from either server
        per_core = _per_core(ag, "agent") / max(1.0, _per_core(bare, "bare"))
        vs_bare = (
            f"{ag['rps'] / bare['rps']:.2f} × bare rate ({per_core:.2f} × per busy core), "
            f"p99 {ag['p99_ms'] / bare['p99_ms']:.2f} × bare"
        )
        if c == main_c:
            tgt = f"≥ {TARGET_NOMATCH_RPS:,.0f}/s, p99 ≤ {TARGET_NOMATCH_P99_MS:g} ms"
            ratio = (
                f"**{ag['rps'] / TARGET_NOMATCH_RPS:.2f}** of target rate, p99 "
                f"**{ag['p99_ms'] / TARGET_NOMATCH_P99_MS:.2f}** × target; {vs_bare}"
            )
        else:
            tgt, ratio = "–", vs_bare
        lines.append(
            f"| no-match, {c} conn: **agent** | {ag['rps']:,.0f}/s, p50 {_ms(ag, 'p50_ms')} ms, "
            f"p99 {_ms(ag, 'p99_ms')} ms (agent {ag['cpu'].get('agent', 0):.2f} cores, "
            f"handler {ag['handler_ms'] * 1000:.0f} µs{_load(ag['cpu'])}) | {tgt} | {ratio} |"
        )
        lines.append(
            f"| no-match, {c} conn: bare Sanic | {bare['rps']:,.0f}/s, p50 {_ms(bare, 'p50_ms')} ms, "
            f"p99 {_ms(bare, 'p99_ms')} ms ({bare['cpu'].get('bare', 0):.2f} cores{_load(bare['cpu'])}) | "
            "baseline | – |"
        )
    bare_json = by.get(("bare-json", main_c))
    if bare_json and by.get(("agent", main_c)):
        ag = by[("agent", main_c)]
        lines.append(
            f"| no-match, {main_c} conn: bare Sanic, standard-library json | {bare_json['rps']:,.0f}/s, "
            f"p50 {_ms(bare_json, 'p50_ms')} ms, p99 {_ms(bare_json, 'p99_ms')} ms "
            f"({bare_json['cpu'].get('bare-json', 0):.2f} cores{_load(bare_json['cpu'])}) | – | "
            f"agent {ag['rps'] / bare_json['rps']:.2f} × this rate |"
        )
    empty = by.get(("agent-empty-ns", main_c))
    bare_main = by.get(("bare", main_c))
    if empty and bare_main:
        lines.append(
            f"| no-match, {main_c} conn: agent, namespace without placements | {empty['rps']:,.0f}/s, "
            f"p50 {_ms(empty, 'p50_ms')} ms, p99 {_ms(empty, 'p99_ms')} ms (handler {empty['handler_ms'] * 1000:.0f} µs"
            f"{_load(empty['cpu'])}) | – | {empty['rps'] / bare_main['rps']:.2f} × bare rate |"
        )
    claimed = sum(r.get("claimed") or 0 for r in results.get("match", []))
    for r in results.get("nomatch_after_claims", []):
        before = by.get(("agent", r["connections"]))
        ratio = (
            f"{r['rps'] / before['rps']:.2f} × the rate before, p99 {r['p99_ms'] / before['p99_ms']:.2f} × before"
            if before
            else "–"
        )
        lines.append(
            f"| no-match, {r['connections']} conn: agent, after the match phase ({claimed:,} placements Claimed) | "
            f"{r['rps']:,.0f}/s, p50 {_ms(r, 'p50_ms')} ms, p99 {_ms(r, 'p99_ms')} ms, "
            f"p99.9 {_ms(r, 'p999_ms')} ms{_load(r['cpu'])} | – | {ratio} |"
        )
    for mode, d in (results.get("pods") or {}).items():
        arms = [arm for arm in ("agent", "bare", "go", "none") if arm in d]
        names = {"agent": "agent", "bare": "bare Sanic", "go": "Go no-op", "none": "no"}
        handler = f"agent handler {d['agent_handler_ms'] * 1000:.0f} µs" if d.get("agent_handler_ms") else ""
        handler = handler or "no webhook called: matchConditions"
        others = "; ".join(
            f"{arm}/none {d[f'{arm}_ratio_mean']:.2f} (mean), +{d[f'{arm}_added_ms_mean']:.2f} ms"
            for arm in arms
            if arm not in ("agent", "none")
        )
        lines.append(
            f"| pod create, {mode} (n={d['agent']['n']} per arm): "
            + " / ".join(f"{names[arm]} webhook" for arm in arms)
            + " | mean "
            + " / ".join(f"{d[arm]['mean']:.2f}" for arm in arms)
            + " ms, p50 "
            + " / ".join(f"{d[arm]['p50']:.2f}" for arm in arms)
            + f" ms ({handler}{_load(d['cpu'])}) | agent/none ≤ {TARGET_POD_OVERHEAD:.2f} | "
            f"agent/none **{d['agent_ratio_mean']:.2f}** (mean), {d['agent_ratio_p50']:.2f} (p50), "
            f"+{d['agent_added_ms_mean']:.2f} ms; {others} |"
        )
    for mode, d in (results.get("put_baseline") or {}).items():
        lines.append(
            f"| claim write alone: status PUT to the apiserver, {mode} (n={d['n']}) | {d['per_s']:,.0f}/s, "
            f"p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms{_load(d['cpu'])} | – | baseline |"
        )
    put = (results.get("put_baseline") or {}).get("sequential")
    for r in results.get("match", []):
        ratio = f"p99 **{r['p99_ms'] / TARGET_MATCH_P99_MS:.2f}** × target"
        if put and r["connections"] == 1:
            ratio += f"; p50 {r['p50_ms'] / put['p50']:.2f} × the PUT alone"
        lines.append(
            f"| match + claim, {r['connections']} conn: {r['requests']} reviews, {r['patched']} patched, "
            f"{r['claimed']} Claimed | {r['rps']:,.0f}/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms "
            f"(agent handler incl. the PUT {r['handler_ms']:.2f} ms{_load(r['cpu'])}) | "
            f"p99 ≤ {TARGET_MATCH_P99_MS:g} ms | {ratio} |"
        )
    leader = {r["connections"]: r for r in results.get("match", [])}
    for r in results.get("match_follower", []):
        ld = leader.get(r["connections"])
        ratio = f"p99 **{r['p99_ms'] / TARGET_MATCH_P99_MS:.2f}** × target"
        if ld:
            ratio += f"; p50 {r['p50_ms'] / ld['p50_ms']:.2f} ×, p99 {r['p99_ms'] / ld['p99_ms']:.2f} × the leader's"
        lines.append(
            f"| match + claim, {r['connections']} conn, on a replica whose controller is idle (not the leader): "
            f"{r['requests']} reviews, {r['patched']} patched, {r['claimed']} Claimed | {r['rps']:,.0f}/s, "
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms (handler incl. the PUT {r['handler_ms']:.2f} ms"
            f"{_load(r['cpu'])}) | p99 ≤ {TARGET_MATCH_P99_MS:g} ms | {ratio} |"
        )
    for label, prof in (results.get("profiles") or {}).items():
        lines += ["", f"py-spy, {label}: {prof['samples']} samples of the agent's busy thread"]
        lines += ["  self:"] + [f"    {share:5.1f}%  {name}" for name, share in prof["self"]]
        lines += ["  inclusive:"] + [f"    {share:5.1f}%  {name}" for name, share in prof["inclusive"]]
    return "\n".join(lines)
