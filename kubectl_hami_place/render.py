"""Terminal rendering of the cluster view: per-GPU tables, totals and the occupancy heatmap."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

from tabulate import tabulate

from hami_place_core.fit import GpuUsage
from hami_place_core.fragmentation import ClusterMetrics, NodeMetrics, free_share
from hami_place_core.state import ClusterState, NodeState


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


def node_table(node: NodeState, wide: bool) -> str:
    headers = ["GPU", "MODEL", "MEMORY GiB", "MEM%", "CORES", "SLOTS", "FREE", "HEALTH", "PODS"]
    if wide:
        headers = ["GPU", "UUID", "MODEL", "NUMA", "MODE", *headers[2:]]
    rows = []
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
    return tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True)


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


def problems_text(state: ClusterState, limit: int = 10) -> str:
    lines = [f"node {n.name}: {n.error}" for n in state.nodes.values() if n.error]
    lines += state.problem_lines()
    if not lines:
        return ""
    shown = [f"  {line}" for line in sorted(lines)[:limit]]
    if len(lines) > limit:
        shown.append(f"  … {len(lines) - limit} more (see -o json)")
    return "PROBLEMS\n" + "\n".join(shown)


def render_tables(state: ClusterState, metrics: ClusterMetrics, names: Iterable[str], wide: bool) -> str:
    blocks = []
    for name in names:
        node = state.nodes[name]
        blocks.append(node_header(node, metrics.nodes.get(name)))
        if node.devices:
            blocks[-1] += "\n" + node_table(node, wide)
        elif node.error:
            blocks[-1] += f"\n  unreadable GPU inventory: {node.error}"
    blocks.append(cluster_table(state, metrics))
    probs = problems_text(state)
    if probs:
        blocks.append(probs)
    return "\n\n".join(blocks)


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


def heatmap(
    state: ClusterState, metrics: ClusterMetrics, names: list[str], color: bool, width: int | None = None
) -> str:
    """One cell per GPU, nodes as blocks packed into lines: 1,000 nodes fit on one screen or two."""
    width = width or shutil.get_terminal_size((120, 40)).columns
    nodes = [state.nodes[n] for n in names if state.nodes[n].devices]
    label_w = min(24, max((len(n.name) for n in nodes), default=4))
    blocks = []
    for n in nodes:
        cells = [_cell(n, g.uuid) for g in n.devices]
        if color:
            cells = [f"\x1b[{COLORS[c]}m{c}\x1b[0m" for c in cells]
        blocks.append((n.name, "".join(cells), len(n.devices)))
    lines = []
    i = 0
    while i < len(blocks):
        line_blocks: list[str] = []
        used = label_w + 2
        start = blocks[i][0]
        while i < len(blocks) and (not line_blocks or used + blocks[i][2] + 1 <= width):
            line_blocks.append(blocks[i][1])
            used += blocks[i][2] + 1
            i += 1
        lines.append(f"{start[:label_w]:<{label_w}}  " + " ".join(line_blocks))
    t = metrics.total
    legend = (
        f"legend: {SHADES[0]} free  {SHADES[1]} ≤25%  {SHADES[2]} ≤50%  {SHADES[3]} ≤75%  {SHADES[4]} >75% used  "
        f"{UNHEALTHY} unhealthy/cordoned   (one cell per GPU, one block per node; row label = first node)"
    )
    summary = (
        f"{len(nodes)} nodes, {t.gpus} GPUs: {t.whole_free} whole free, {t.in_use} in use, "
        f"stranded {t.stranded:.2f} GPU, FGD {t.fgd:.2f} GPU ({100 * metrics.fragmentation_rate:.0f}% of free)"
    )
    return "\n".join([*lines, "", legend, summary])


def warn_unreadable(state: ClusterState) -> None:
    """One warning line on stderr when some node or pod carries unusable HAMi data: the command
    still answers for the rest of the cluster (exit 0), and says what it left out."""
    import click

    line = state.unreadable_summary()
    if line:
        click.echo(f"warning: {line}", err=True)
