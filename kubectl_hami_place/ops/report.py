"""`plan --report FILE`: the plan's before/after GPU heatmap as a picture (FILE.html or FILE.svg).

One self-contained file (no scripts, fonts, styles or images from elsewhere): the title carries the
plan's own figures (Plan.before/after, gpus_freed), then two panels side by side, "before" and
"after" the moves, with the same layout: one cell per GPU coloured by its used share in the text
heatmap's five steps (render.py), nodes in natural order packed into rows labelled first..last,
and the GPUs the plan empties outlined in both panels. The "after" state is the core's replay of
the moves (planning.apply_moves): this module only draws.

Size and readability: a cell is one `<use>` of a shared square, about 30 bytes, and a node a
group with its name as tooltip, so both panels of the 1,213-node example (6,212 GPUs in 86 rows of
about 14 nodes, 2,584 x 1,370 px) take about 0.57 MB (50 kB gzipped). Above MAX_FULL_GPUS GPUs
the panels draw only the nodes the plan moves pods from or to, and a line says how many nodes
(and GPUs) they leave out: every GPU that changes is still drawn, and the file grows with the
plan (at most two nodes per move), not with the cluster.

Every name drawn (node names come from the cluster, the source from the command line) is escaped,
and characters XML cannot hold are replaced, so a hostile name can neither inject markup nor break
the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from hami_place_core.fragmentation import free_share
from hami_place_core.planning import Plan, apply_moves
from hami_place_core.state import ClusterState, NodeState
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.ops.render import before_after, natural_sorted, range_label

FORMATS = {".html": "html", ".svg": "svg"}

# The text heatmap's steps (render.SHADES: free, ≤25%, ≤50%, ≤75%, >75% used), then unhealthy or
# cordoned: green for free (as the text heatmap), then a light-to-dark scale, so the picture reads
# without the legend.
COLORS = ("#a6dba0", "#fee8c8", "#fdbb84", "#ef6548", "#b30000", "#9e9e9e")
STEP_LABELS = ("free", "≤25% used", "≤50% used", "≤75% used", ">75% used", "unhealthy or cordoned")
UNHEALTHY = 5
EMPTIED_COLOR = "#1d4ed8"  # the outline of a GPU the plan empties
TAKEN_COLOR = "#7c3aed"  # the dashed outline of a free GPU the plan starts using

# Panels with every node up to this many GPUs (the example's 6,212 are drawn in full); above it,
# only the nodes the plan touches, so the file stays under about a megabyte.
MAX_FULL_GPUS = 10_000

CELL, PITCH, NODE_GAP, ROW_H = 10, 12, 6, 14  # px: a GPU's square, its step, between nodes, a row
ROW_W = 960  # px of cells per row, after the label column
CHAR_W = 6.7  # px per character of the 11px monospace labels (for the label column's width)
LABEL_CHARS = 36  # longer row labels are cut (the node's own tooltip keeps its full name)
MARGIN, PANEL_GAP, HEAD_H = 16, 32, 22

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def report_format(path: str) -> str | None:
    """'html' or 'svg' by the file's extension (any case); None for any other."""
    return FORMATS.get(Path(path).suffix.lower())


def text(value: object) -> str:
    """`value` safe inside XML/HTML text and quoted attributes."""
    return escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def step(node: NodeState, uuid: str) -> int:
    """A GPU's colour step: the text heatmap's cell (render._cell), as an index into COLORS."""
    g = node.by_uuid(uuid)
    if g is None or not g.health or uuid in node.cordoned:
        return UNHEALTHY
    usage = node.usage[uuid]
    if usage.used == 0:
        return 0
    return min(4, 1 + int((1.0 - free_share(g, usage)) * 4 - 1e-9))


def changed_gpus(before: ClusterState, after: ClusterState) -> tuple[set[str], set[str]]:
    """(emptied, taken): UUIDs in use before the moves and idle after, and the reverse."""
    emptied: set[str] = set()
    taken: set[str] = set()
    for name, node in before.nodes.items():
        for g in node.devices:
            was, now = node.usage[g.uuid].used > 0, after.nodes[name].usage[g.uuid].used > 0
            if was and not now:
                emptied.add(g.uuid)
            elif now and not was:
                taken.add(g.uuid)
    return emptied, taken


@dataclass(frozen=True)
class Layout:
    """Where each shown node's first cell goes inside a panel; the same for both panels."""

    nodes: list[str]
    origins: dict[str, tuple[float, float]]
    labels: list[tuple[str, float]]  # (row label, y of its row)
    label_w: float
    width: float
    height: float
    left_out: tuple[int, int]  # (nodes, GPUs) not drawn


def shown_nodes(state: ClusterState, plan: Plan) -> tuple[list[str], tuple[int, int]]:
    """Every node with GPUs in natural order, or past MAX_FULL_GPUS only those the plan touches;
    and how many nodes and GPUs that leaves out."""
    with_gpus = [n for n in natural_sorted(state.nodes) if state.nodes[n].devices]
    if sum(len(state.nodes[n].devices) for n in with_gpus) <= MAX_FULL_GPUS:
        return with_gpus, (0, 0)
    touched = {m.from_node for m in plan.moves} | {m.to_node for m in plan.moves}
    shown = [n for n in with_gpus if n in touched]
    hidden = [n for n in with_gpus if n not in touched]
    return shown, (len(hidden), sum(len(state.nodes[n].devices) for n in hidden))


def _pack(widths: Sequence[float]) -> list[list[int]]:
    """Node blocks (by width) packed into rows of ROW_W px; a block wider than a row gets its own."""
    rows: list[list[int]] = []
    used = ROW_W + 1.0
    for i, w in enumerate(widths):
        if rows and used + NODE_GAP + w <= ROW_W:
            rows[-1].append(i)
            used += NODE_GAP + w
        else:
            rows.append([i])
            used = w
    return rows


def layout(state: ClusterState, plan: Plan) -> Layout:
    names, left_out = shown_nodes(state, plan)
    widths = [len(state.nodes[n].devices) * PITCH - (PITCH - CELL) for n in names]
    rows = _pack(widths)
    labels = [range_label(names[r[0]], names[r[-1]]) for r in rows]
    labels = [label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…" for label in labels]
    label_w = round(max((len(label) for label in labels), default=4) * CHAR_W) + 10
    origins: dict[str, tuple[float, float]] = {}
    placed: list[tuple[str, float]] = []
    width = 0.0
    for r, (row, label) in enumerate(zip(rows, labels, strict=True)):
        x, y = label_w, HEAD_H + r * ROW_H
        placed.append((label, y))
        for i in row:
            origins[names[i]] = (x, y)
            x += widths[i] + NODE_GAP
        width = max(width, x - NODE_GAP)
    return Layout(names, origins, placed, label_w, max(width, 240.0), HEAD_H + len(rows) * ROW_H, left_out)


def _panel(
    state: ClusterState, lay: Layout, marks: tuple[set[str], set[str]], panel: tuple[str, str], x0: float
) -> list[str]:
    """One panel as SVG: its heading, row labels, one node group per node and its GPUs' cells."""
    emptied, taken = marks
    out = [f'<g id="{panel[0]}" transform="translate({x0:g},0)">']
    out.append(f'<text x="0" y="14" class="h">{text(panel[1])}</text>')
    out += [f'<text x="0" y="{y + CELL - 1:g}" class="l">{text(label)}</text>' for label, y in lay.labels]
    overlay: list[str] = []
    for name in lay.nodes:
        node, (x, y) = state.nodes[name], lay.origins[name]
        cells = []
        for i, g in enumerate(node.devices):
            cx = x + i * PITCH
            cells.append(f'<use href="#s{step(node, g.uuid)}" x="{cx:g}" y="{y:g}"/>')
            if g.uuid in emptied or g.uuid in taken:
                mark = "emptied" if g.uuid in emptied else "taken"
                overlay.append(f'<use href="#{mark}" x="{cx:g}" y="{y:g}"/>')
        out.append(f'<g class="node"><title>{text(name)}</title>{"".join(cells)}</g>')
    out += overlay  # drawn last, so no neighbouring cell covers an outline
    out.append("</g>")
    return out


def _defs() -> str:
    squares = "".join(
        f'<rect id="s{i}" width="{CELL}" height="{CELL}" fill="{c}" stroke="#0000001f"/>' for i, c in enumerate(COLORS)
    )
    outlines = (
        f'<rect id="emptied" x="-1" y="-1" width="{CELL + 2}" height="{CELL + 2}" fill="none" '
        f'stroke="{EMPTIED_COLOR}" stroke-width="2"/>'
        f'<rect id="taken" x="-1" y="-1" width="{CELL + 2}" height="{CELL + 2}" fill="none" '
        f'stroke="{TAKEN_COLOR}" stroke-width="2" stroke-dasharray="3 2"/>'
    )
    style = (
        "<style>text{font-family:sans-serif;fill:#111}.l{font:11px monospace;fill:#333}"
        ".h{font-size:14px;font-weight:bold}.t{font-size:16px;font-weight:bold}.s{font-size:12px}</style>"
    )
    return f"<defs>{style}{squares}{outlines}</defs>"


def title_lines(plan: Plan, source: str) -> list[str]:
    """The picture's title: the plan's own headline figures (the same as `plan`'s table)."""
    b, a = plan.before, plan.after
    return [
        f"hami-place plan ({plan.objective}): {len(plan.moves)} moves free {plan.gpus_freed} whole GPUs",
        f"whole GPUs free {b.whole_free} → {a.whole_free} · GPUs in use {b.in_use} → {a.in_use} · "
        f"stranded {b.stranded:.2f} → {a.stranded:.2f} GPU · FGD {b.fgd:.2f} → {a.fgd:.2f} GPU",
        f"source: {source} · {plan.solver} planner, {plan.seconds:.2f}s",
    ]


def _legend(y: float, marks: tuple[set[str], set[str]], lay: Layout) -> tuple[list[str], float]:
    """Swatches for the colour steps and the two outlines, and what the panels leave out; and the
    width they need."""
    out, x = [], float(MARGIN)
    entries = [(f"s{i}", label) for i, label in enumerate(STEP_LABELS)]
    entries += [("emptied", f"emptied by the plan ({len(marks[0])})")]
    entries += [("taken", f"free before, used after ({len(marks[1])})")]
    for ref, label in entries:
        base = f'<use href="#s0" x="{x:g}" y="{y:g}"/>' if ref in ("emptied", "taken") else ""
        out.append(f'{base}<use href="#{ref}" x="{x:g}" y="{y:g}"/>')
        out.append(f'<text x="{x + CELL + 5:g}" y="{y + CELL - 1:g}" class="s">{text(label)}</text>')
        x += CELL + 5 + len(label) * 6.5 + 18
    note = "one cell per GPU, one block per node; a row's label names its first..last node; hover a block"
    if lay.left_out[0]:
        note = (
            f"only the {len(lay.nodes)} nodes the plan moves pods from or to are drawn; the other "
            f"{lay.left_out[0]} nodes ({lay.left_out[1]} GPUs) keep their layout · " + note
        )
    out.append(f'<text x="{MARGIN}" y="{y + CELL + 18:g}" class="s">{text(note)}</text>')
    return out, max(x, MARGIN + len(note) * 7.0) + MARGIN


def svg(state: ClusterState, after: ClusterState, plan: Plan, source: str) -> str:
    """The picture as one SVG element (a file of its own, or inline in the HTML page)."""
    lay = layout(state, plan)
    marks = changed_gpus(state, after)
    lines = title_lines(plan, source)
    top = MARGIN + 18 + 18 * len(lines)
    panel_w = lay.label_w + lay.width
    legend_y = top + lay.height + 16
    legend, legend_w = _legend(legend_y, marks, lay)
    width = max(2 * MARGIN + 2 * panel_w + PANEL_GAP, legend_w, MARGIN + max(len(s) for s in lines) * 8.0)
    height = legend_y + CELL + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
        f'viewBox="0 0 {width:g} {height:g}">',
        _defs(),
        f'<rect width="{width:g}" height="{height:g}" fill="#fff"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 12}" class="t">{text(lines[0])}</text>',
    ]
    out += [f'<text x="{MARGIN}" y="{MARGIN + 16 + 18 * i}" class="s">{text(s)}</text>' for i, s in enumerate(lines)][
        1:
    ]
    out.append(f'<g transform="translate({MARGIN},{top:g})">')
    b, a = plan.before.whole_free, plan.after.whole_free
    out += _panel(state, lay, marks, ("before", f"before: {b} whole GPUs free"), 0)
    after_head = f"after the {len(plan.moves)} moves: {a} whole GPUs free"
    out += _panel(after, lay, marks, ("after", after_head), panel_w + PANEL_GAP)
    out.append("</g>")
    out += legend
    out.append("</svg>")
    return "\n".join(out)


def html(state: ClusterState, after: ClusterState, plan: Plan, source: str) -> str:
    """A page with the picture (scaled to the window; zoom in, it is vector) and under it the plan's
    before/after figures as a table. Its Content Security Policy forbids loading anything: the
    file is all there is."""
    rows = before_after(plan.before, plan.after)
    table = "".join(f"<tr><th>{text(k)}</th><td>{text(v)}</td><td>{text(w)}</td></tr>" for k, v, w in rows)
    head = title_lines(plan, source)[0]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
            f"<title>{text(head)}</title>",
            "<style>body{font-family:sans-serif;margin:16px;color:#111}svg{max-width:100%;height:auto}"
            "table{border-collapse:collapse;margin:8px 0}th,td{padding:2px 10px;text-align:right}"
            "th{text-align:left;font-weight:normal}</style>",
            "</head><body>",
            svg(state, after, plan, source),
            f'<table id="metrics"><tr><th></th><th>before</th><th>after</th></tr>{table}</table>',
            "</body></html>",
        ]
    )


def build(state: ClusterState, plan: Plan, source: str, fmt: str) -> str:
    """The report in format `fmt` ('html' or 'svg'); the "after" state is the core's replay."""
    after = apply_moves(state, plan.moves)
    if fmt == "html":
        return html(state, after, plan, source)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg(state, after, plan, source) + "\n"


def write(path: str, content: str) -> None:
    """Write the report, or say in one line why it cannot be written (exit 1)."""
    try:
        Path(path).write_text(content, encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write the report {path}: {e.strerror or e}") from e
