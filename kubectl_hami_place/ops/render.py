"""Terminal rendering of the cluster view: per-GPU tables, totals and the occupancy heatmap."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tabulate import tabulate

from hami_place_core import capacity
from hami_place_core.fit import GpuUsage
from hami_place_core.fragmentation import ClusterMetrics, NodeMetrics, free_share
from hami_place_core.state import ClusterState, NodeState

if TYPE_CHECKING:  # the planner is imported only by the commands that plan
    from hami_place_core.planning.model import Plan, PlanMetrics

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting gpu-node-2 before gpu-node-10: digit runs compare as numbers, the rest as
    text; names equal as numbers (node-01, node-1) fall back to plain text order."""
    parts = [(1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(name) if part]
    return (*parts, (2, name))


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)


def _pct(used: int, total: int) -> str:
    return f"{round(100 * used / total)}%" if total else "-"


def _mib(n: int) -> str:
    return f"{n / 1024:.1f}"


def _health(node: NodeState, uuid: str, healthy: bool) -> str:
    if not healthy:
        return "unhealthy"
    if uuid in node.cordoned:
        return "cordoned"
    return "ok"


def _pods(keys: list[str], wide: bool, namespace_hint: str | None = None) -> str:
    if not keys:
        return "-"
    names = sorted(keys)
    if not wide and len(names) > 3:
        return ", ".join(names[:3]) + f" +{len(names) - 3}"
    return ", ".join(names)


def before_after(b: PlanMetrics, a: PlanMetrics) -> list[tuple[str, object, object]]:
    """The plan's headline metrics before and after its moves, as `plan` and `plan --report` show them."""
    return [
        ("whole GPUs free", b.whole_free, a.whole_free),
        ("GPUs in use", b.in_use, a.in_use),
        ("free capacity (GPUs)", f"{b.free:.2f}", f"{a.free:.2f}"),
        ("stranded (GPUs)", f"{b.stranded:.2f}", f"{a.stranded:.2f}"),
        ("FGD (GPUs)", f"{b.fgd:.2f}", f"{a.fgd:.2f}"),
    ]


def demand_line(p: Plan) -> str | None:
    """The demand's room before and after the plan, in one line: completely free nodes, then the
    pods of each shape that fit at once (at most eight shapes; -o json has them all)."""
    if p.demand is None or p.room_before is None or p.room_after is None:
        return None
    shapes = list(zip(p.demand.items, p.room_before.pods, p.room_after.pods, strict=True))
    rooms = "; ".join(f"{i.shape}-GPU pods {b} -> {a}" for i, b, a in shapes[:8])
    more = f"; {len(shapes) - 8} more shapes in -o json" if len(shapes) > 8 else ""
    return (
        f"room for the demand ({p.demand.source}): completely free nodes {p.room_before.free_nodes} -> "
        f"{p.room_after.free_nodes}; {rooms}{more}"
    )


def node_header(node: NodeState, m: NodeMetrics | None) -> str:
    flags = []
    if not node.ready:
        flags.append("NotReady")
    if node.unschedulable:
        flags.append("SchedulingDisabled")
    state = ",".join(flags) or "Ready"
    models = sorted({g.type for g in node.devices})
    head = f"NODE {node.name}  {state}  {len(node.devices)} GPU  {' / '.join(models) or ''}".rstrip()
    if m is not None:
        head += (
            f"\n  free {m.free:.2f} GPU  whole-free {m.whole_free}  in-use {m.in_use}  "
            f"stranded {m.stranded:.2f}  fgd {m.fgd:.2f}"
        )
    return head


def node_table(node: NodeState, wide: bool, headers: bool = True) -> str:
    head = ["GPU", "MODEL", "MEMORY GiB", "MEM%", "CORES", "SLOTS", "FREE", "HEALTH", "PODS"]
    if wide:
        head = ["GPU", "UUID", "MODEL", "NUMA", "MODE", *head[2:]]
    rows: list[list[object]] = []
    for g in node.devices:
        u: GpuUsage = node.usage[g.uuid]
        row = [
            g.index,
            g.type,
            f"{_mib(u.usedmem)}/{_mib(g.devmem)}",
            _pct(u.usedmem, g.devmem),
            f"{u.usedcores}/{g.devcore}",
            f"{u.used}/{g.count}",
            f"{free_share(g, u):.2f}",
            _health(node, g.uuid, g.health),
            _pods(node.pods[g.uuid], wide),
        ]
        if wide:
            row = [row[0], g.uuid, row[1], g.numa, g.mode, *row[2:]]
        rows.append(row)
    return _table(rows, head if headers else None)


def _table(rows: list[list[object]], head: list[str] | None) -> str:
    """tabulate's plain table; without `head`, the same columns with no header line (--no-headers)."""
    return tabulate(rows, headers=head or (), tablefmt="plain", disable_numparse=True)


def cluster_table(state: ClusterState, metrics: ClusterMetrics) -> str:
    t = metrics.total
    rows = [
        [
            "nodes",
            f"{len(metrics.nodes)} with GPUs"
            + (f", {len(metrics.unparseable_nodes)} unreadable" if metrics.unparseable_nodes else ""),
        ],
        ["GPUs", f"{t.gpus} ({t.healthy} healthy)"],
        ["whole GPUs free", f"{t.whole_free}"],
        *_room_rows(state, metrics),
        ["GPUs in use", f"{t.in_use}"],
        ["free capacity", f"{t.free:.2f} GPU"],
        ["stranded (no whole-GPU request can use it)", f"{t.stranded:.2f} GPU"],
        [
            "fragmentation (FGD, expected unusable)",
            f"{t.fgd:.2f} GPU ({100 * metrics.fragmentation_rate:.0f}% of free)",
        ],
        ["memory used", f"{_mib(t.mem_used)}/{_mib(t.mem_total)} GiB ({_pct(t.mem_used, t.mem_total)})"],
        ["cores used", f"{t.cores_used}/{t.cores_total} ({_pct(t.cores_used, t.cores_total)})"],
        ["share slots used", f"{t.slots_used}/{t.slots_total}"],
    ]
    mix = ", ".join(f"{task.describe()} {p:.0%}" for task, p in metrics.mix.tasks[:4])
    if len(metrics.mix.tasks) > 4:
        mix += f", +{len(metrics.mix.tasks) - 4} more"
    rows.append(["workload mix (for FGD)", mix])
    return "CLUSTER\n" + tabulate(rows, tablefmt="plain", disable_numparse=True)


def _room_rows(state: ClusterState, metrics: ClusterMetrics) -> list[list[str]]:
    """Completely free nodes, and how many pods of each GPU count the running pods use fit at
    once (hami_place_core/capacity.py): the room a waiting multi-GPU job looks for."""
    demand = capacity.choose_demand(state)
    room = capacity.room(state, demand, group_of=None, nodes=[n for n in metrics.nodes if n in state.nodes])
    fits = ", ".join(f"{i.shape}: {n}" for i, n in list(zip(demand.items, room.pods, strict=True))[:8])
    return [["completely free nodes", str(room.free_nodes)], ["room for pods of k GPUs", f"{fits} ({demand.source})"]]


def problems_text(state: ClusterState, limit: int = 10) -> str:
    lines = [f"node {n.name}: {n.error}" for n in state.nodes.values() if n.error]
    lines += state.problem_lines()
    if not lines:
        return ""
    shown = [f"  {line}" for line in sorted(lines)[:limit]]
    if len(lines) > limit:
        shown.append(f"  … {len(lines) - limit} more (see -o json)")
    return "PROBLEMS\n" + "\n".join(shown)


def render_tables(
    state: ClusterState, metrics: ClusterMetrics, names: Iterable[str], wide: bool, headers: bool = True
) -> str:
    blocks = []
    for name in names:
        node = state.nodes[name]
        blocks.append(node_header(node, metrics.nodes.get(name)))
        if node.devices:
            blocks[-1] += "\n" + node_table(node, wide, headers)
        elif node.error:
            blocks[-1] += f"\n  unreadable GPU inventory: {node.error}"
    blocks.append(cluster_table(state, metrics))
    probs = problems_text(state)
    if probs:
        blocks.append(probs)
    return "\n\n".join(blocks)


SUMMARY_HEADERS = ["NODE", "STATUS", "GPUS", "WHOLE-FREE", "IN-USE", "FREE", "STRANDED", "FGD"]


def summary_table(state: ClusterState, metrics: ClusterMetrics, names: Iterable[str], headers: bool = True) -> str:
    """`inspect -o summary`: one line per node, for clusters too large for a table per node. FREE,
    STRANDED and FGD are in GPUs, as in the node headers; a node whose GPU inventory cannot be
    read shows "-" (the warning on stderr says why). Every cell is one word, for awk."""
    rows: list[list[object]] = []
    for name in names:
        node, m = state.nodes[name], metrics.nodes.get(name)
        flags = [f for f, on in (("NotReady", not node.ready), ("SchedulingDisabled", node.unschedulable)) if on]
        status = ",".join(flags) or "Ready"
        if m is None:
            rows.append([name, status, "-", "-", "-", "-", "-", "-"])
            continue
        rows.append(
            [name, status, m.gpus, m.whole_free, m.in_use, f"{m.free:.2f}", f"{m.stranded:.2f}", f"{m.fgd:.2f}"]
        )
    return _table(rows, SUMMARY_HEADERS if headers else None)


# ---- heatmap ------------------------------------------------------------------------------------
SHADES = "·░▒▓█"  # free, ≤25%, ≤50%, ≤75%, more
UNHEALTHY = "✗"
COLORS = {"·": "32", "░": "36", "▒": "33", "▓": "35", "█": "31", "✗": "90"}


def _cell(node: NodeState, uuid: str) -> str:
    g = node.by_uuid(uuid)
    if g is None or not g.health or uuid in node.cordoned:
        return UNHEALTHY
    used = 1.0 - free_share(g, node.usage[uuid]) if node.usage[uuid].used else 0.0
    if node.usage[uuid].used == 0:
        return SHADES[0]
    return SHADES[min(4, 1 + int(used * 4 - 1e-9))]


def use_color(stream_isatty: bool) -> bool:
    return stream_isatty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def range_label(first: str, last: str) -> str:
    """A heatmap row's label, naming every node of the row: `gpu-node-1..8` for gpu-node-1 to
    gpu-node-8 (names that differ only in their trailing number write the rest once), `a..b`
    otherwise, or the one node's name."""
    if first == last:
        return first
    shared = next((i for i, (x, y) in enumerate(zip(first, last, strict=False)) if x != y), min(len(first), len(last)))
    prefix = first[:shared].rstrip("0123456789")
    a, b = first[len(prefix) :], last[len(prefix) :]
    if prefix and a.isdigit() and b.isdigit():
        return f"{first}..{b}"
    return f"{first}..{last}"


def _pack(sizes: list[int], label_w: int, width: int) -> list[list[int]]:
    """Blocks (by their widths) packed into lines of `width` after a label of `label_w` and two
    spaces, one space between blocks; a block wider than a line gets a line of its own."""
    rows: list[list[int]] = []
    used = width + 1
    for i, size in enumerate(sizes):
        if rows and rows[-1] and used + size + 1 <= width:
            rows[-1].append(i)
            used += size + 1
        else:
            rows.append([i])
            used = label_w + 2 + size
    return rows


def heatmap(
    state: ClusterState, metrics: ClusterMetrics, names: list[str], color: bool, width: int | None = None
) -> str:
    """One cell per GPU, nodes as blocks packed into lines in natural order (gpu-node-2 before
    gpu-node-10): 1,000 nodes fit on one screen or two. Each line is labelled with the range of
    nodes it shows; when those labels would take more than a third of the line, each label gets
    a line of its own above its blocks."""
    width = width or shutil.get_terminal_size((120, 40)).columns
    nodes = [state.nodes[n] for n in natural_sorted(dict.fromkeys(names)) if state.nodes[n].devices]
    blocks = []
    for n in nodes:
        cells = [_cell(n, g.uuid) for g in n.devices]
        if color:
            cells = [f"\x1b[{COLORS[c]}m{c}\x1b[0m" for c in cells]
        blocks.append("".join(cells))
    sizes = [len(n.devices) for n in nodes]
    cap = max(24, width // 3)
    label_w = min(cap, max((len(n.name) for n in nodes), default=4))

    def layout(label_w: int) -> tuple[list[list[int]], list[str], int]:
        rows = _pack(sizes, label_w, width)
        labels = [range_label(nodes[r[0]].name, nodes[r[-1]].name) for r in rows]
        return rows, labels, max((len(label) for label in labels), default=0)

    rows, labels, need = layout(label_w)
    for _ in range(8):  # a wider label column packs fewer nodes per line: settles in a step or two
        if need <= label_w or need > cap:
            break
        label_w = need
        rows, labels, need = layout(label_w)
    if label_w < need <= cap:  # did not settle: the widest column allowed
        label_w = cap
        rows, labels, need = layout(label_w)
    if need > label_w:  # labels too long for a column: each on a line of its own, above its blocks
        rows, labels, _ = layout(0)
        lines = [f"{label}\n  " + " ".join(blocks[i] for i in r) for label, r in zip(labels, rows, strict=True)]
    else:
        lines = [f"{label:<{need}}  " + " ".join(blocks[i] for i in r) for label, r in zip(labels, rows, strict=True)]
    t = metrics.total
    legend = (
        f"legend: {SHADES[0]} free  {SHADES[1]} ≤25%  {SHADES[2]} ≤50%  {SHADES[3]} ≤75%  {SHADES[4]} >75% used  "
        f"{UNHEALTHY} unhealthy/cordoned   (one cell per GPU, one block per node; a line's label names its nodes, "
        "first..last)"
    )
    summary = (
        f"{len(nodes)} nodes, {t.gpus} GPUs: {t.whole_free} whole free, {t.in_use} in use, "
        f"stranded {t.stranded:.2f} GPU, FGD {t.fgd:.2f} GPU ({100 * metrics.fragmentation_rate:.0f}% of free)"
    )
    return "\n".join([*lines, "", legend, summary])
