"""The planner benchmark's report: the Markdown tables printed from its JSON (per state, --all-lists
and its MILP subsets), and the merge of --all-lists runs split by --lists (``--tables-from``). The
targets the tables are read against are here; the runner measures against the same."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EFFICIENT = 1.3  # moves per freed GPU for the prefix row
TARGET_SHARE = 0.92  # the target: this share of the bound's gain at most EFFICIENT moves per GPU
LIMIT_SECONDS = 2.0  # the target: the planner's time on the full cluster


def table(report: dict[str, Any]) -> str:
    lines = []
    for s in report["states"]:
        lines.append(
            f"\n### cut {s['state']}: whole GPUs free {s['wholeFreeBefore']}, FGD {s['fgdBefore']}; "
            f"upper bounds on the gain: L2 {s['l2Gain']}, patterns {s['patternGain']}"
            + (" (proven)" if s["patternProven"] else "")
            + f", node room {s['boundGain']}"
            + (" (proven)" if s["boundProven"] else " (solver bound)")
        )
        lines.append(
            "\n| method | GPUs freed | % of node-room bound | % of L2 | moves | moves/GPU | seconds | FGD after "
            "| valid |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in s["results"]:
            opt = s["boundGain"] or 0
            pct = f"{100 * r['freed'] / opt:.1f}" if opt else "-"
            pl2 = f"{100 * r['freed'] / s['l2Gain']:.1f}" if s["l2Gain"] else "-"
            valid = "yes" if r["valid"] else f"no ({r['note']})"
            lines.append(
                f"| {r['method']} | {r['freed']} | {pct} | {pl2} | {r['moves']} | {r['movesPerGpu'] or '-'} | "
                f"{r['seconds']} | {r['fgdAfter']} | {valid} |"
            )
        if s["minMovesLp"]:
            lines.append(
                "\nLP lower bound on moves for a gain of "
                + ", ".join(f"{k}: {v}" for k, v in sorted(s["minMovesLp"].items(), key=lambda kv: int(kv[0])))
            )
        if "plannerSeconds" in s:
            lines.append(
                f"\nPlanner time {s['plannerSeconds']} s, {s['limitRatio']} of the {LIMIT_SECONDS:g} s limit; "
                f"reference loop just before: {s['referenceMs']} ms"
            )
        t = s.get("target")
        if t and t.get("gain"):
            lines.append(
                f"\nTarget check (LP, holds for every plan): {round(100 * TARGET_SHARE)}% of the bound is "
                f"{t['gain']} GPUs and needs at least {t['minMovesPerGpu']} moves per GPU; at most {EFFICIENT} "
                f"moves per GPU no plan frees more than {t['mostAtRate']} "
                f"({100 * t['mostAtRate'] / max(1, s['boundGain']):.1f}% of the bound)"
            )
    sub = report.get("subsets")
    if sub:
        lines.append(
            f"\n### MILP on {sub['instances']} random {sub['nodesPerInstance']}-node subsets of cut "
            f"{report['subsetCut']}: {sub['proven']} proven; planner {sub['plannerFreed']} of "
            f"{sub['optimumFreed']} GPUs ({100 * (sub['ratio'] or 0):.1f}%), at the optimum on "
            f"{sub['instancesAtOptimum']}; moves {sub['plannerMoves']} (MILP fewest for its optimum: "
            f"{sub['milpMinMoves']})"
        )
        lines.append(
            f"\nThe exact planner's plan was used on {sub['exactUsed']} (it frees more than the greedy one); "
            f"planner time {sub['plannerSecondsTotal']} s in all, at most {sub['plannerSecondsMax']} s. "
            f"The greedy planner alone (--solver greedy): {sub['greedyFreed']} of {sub['optimumFreed']} GPUs "
            f"({100 * sub['greedyFreed'] / max(1, sub['optimumFreed']):.1f}%), at the optimum on "
            f"{sub['greedyAtOptimum']}, {sub['greedyMoves']} moves"
        )
        if sub["orderable"]:
            lines.append(
                f"\nOn the {sub['orderable']} instances where the MILP's optimum is reachable (a solution of it "
                f"has a valid order, or the planner's plan reaches it): planner {sub['orderablePlannerFreed']} of "
                f"{sub['orderableOptimumFreed']} GPUs "
                f"({100 * sub['orderablePlannerFreed'] / max(1, sub['orderableOptimumFreed']):.1f}%)"
            )
        if sub.get("ordered"):
            lines.append(
                f"\nOn the {sub['ordered']} instances where the optimum over plans whose moves have a valid order "
                f"is settled: planner {sub['orderedPlannerFreed']} of {sub['orderedOptimumFreed']} GPUs "
                f"({100 * sub['orderedPlannerFreed'] / max(1, sub['orderedOptimumFreed']):.1f}%)"
            )
    return "\n".join(lines)


def all_lists_table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| list | cut | seed | whole free | planner (moves) | greedy | ×greedy | FFD prefix (moves) | type bound "
        "| % of bound | moves/GPU | CPU s | ×limit | flags |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bound = f"{r['bound']}" + ("" if r["boundProven"] else "*")
        share = f"{100 * r['shareOfBound']:.1f}" if r["shareOfBound"] is not None else "-"
        ffd = f"{r['ffdPrefix']} ({r['ffdMoves']}{'' if r['ffdComplete'] else ', prefix'})"
        lines.append(
            f"| {r['list']} | {r['cut']:g} | {r['seed']} | {r['wholeFreeBefore']} | {r['planner']} "
            f"({r['plannerMoves']}) | {r['greedy']} | {r['vsGreedy'] or '-'} | {ffd} | {bound} | {share} "
            f"| {r['movesPerGpu'] or '-'} | {r['plannerCpuSeconds']} | {r['limitRatio']} "
            f"| {', '.join(r['flags']) or 'ok'} |"
        )
    return "\n".join(lines)


def subsets_table(subsets: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [
        "| list | subsets | settled | planner / settled ordered optimum | % | at optimum | greedy | deterministic "
        "| planner CPU s, max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in subsets.items():
        got, opt = s["orderedPlannerFreed"], s["orderedOptimumFreed"]
        pct = f"{100 * got / opt:.1f}" if opt else "-"
        flag = "" if not opt or got >= 0.95 * opt else " (<95%)"
        at = sum(1 for r in s["rows"] if r["orderedProven"] and r["planner"] == r["ordered"])
        same = "yes" if not s["determinismDiffers"] else f"no: {s['determinismDiffers']}"
        lines.append(
            f"| {name} | {s['instances']} | {s['ordered']} | {got} / {opt} | {pct}{flag} | {at} "
            f"| {s['greedyFreed']} | {same} | {s.get('plannerCpuSecondsMax', '-')} |"
        )
    return "\n".join(lines)


def print_all_lists(report: Mapping[str, Any]) -> None:
    print("\n## All lists\n\n" + all_lists_table(report["rows"]))
    if report["subsets"]:
        print("\n### MILP subsets\n\n" + subsets_table(report["subsets"]))


def merge_reports(paths: Sequence[Path], out: Path | None) -> int:
    """One table from --all-lists runs split by --lists (run side by side on a shared machine)."""
    reports = [json.loads(p.read_text()) for p in paths]
    rows: dict[tuple[str, float, int], dict[str, Any]] = {}
    for r in reports:  # a run stopped part-way has no cpuSeconds; a state run twice counts once
        for row in r["rows"]:
            rows.setdefault((row["list"], row["cut"], row["seed"]), row)
    merged = {
        "parts": [{k: v for k, v in r.items() if k not in ("rows", "subsets")} for r in reports],
        "rows": list(rows.values()),
        "subsets": {k: v for r in reports for k, v in r["subsets"].items()},
    }
    print_all_lists(merged)
    done = [r["cpuSeconds"] for r in reports if "cpuSeconds" in r]
    print(f"\nCPU {sum(done):.1f} s in the {len(done)} of {len(reports)} runs that finished")
    if out:
        out.write_text(json.dumps(merged, indent=2))
    return 0
