"""`plan --report FILE.html|FILE.svg`: the before/after GPU heatmap, rendered by headless Chromium
and read back (its DOM and its pixels), on small snapshot clusters and the shipped example.

Chromium comes from `make test` (testbed/chromium.py, docs/testing.md); without one these tests
FAIL under CI=true and skip elsewhere, saying what to install."""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.snapshot import make_snapshot
from hami_place_core.state import build_state
from kubectl_hami_place.cli import cli, main
from kubectl_hami_place.ops import report
from kubectl_hami_place.ops.render import SHADES, UNHEALTHY, _cell
from testbed import chromium
from testbed.controlplane.ci import unavailable
from tests.planner_fixtures import moves_of, node, pod

# Natural order differs from text order (1, 10, 2, 9); gpu-node-9 has an unhealthy and a cordoned GPU.
NODES = {"gpu-node-10": 4, "gpu-node-2": 4, "gpu-node-1": 4, "gpu-node-9": 4}
NATURAL = ["gpu-node-1", "gpu-node-2", "gpu-node-9", "gpu-node-10"]
HOSTILE = 'gpu-node-7"><script>document.title="owned"</script><b>&amp;'


def cluster_nodes(names: dict[str, int]) -> list[dict[str, Any]]:
    return [
        node(n, k, unhealthy=(3,) if n == "gpu-node-9" else (), cordoned=(2,) if n == "gpu-node-9" else ())
        for n, k in names.items()
    ]


def fragmented_pods(names: list[str]) -> list[dict[str, Any]]:
    """Small slices spread one per GPU: the planner packs them and empties GPUs."""
    a, b, c = names[:3]
    return [
        pod("a", a, (0,), 30),
        pod("b", a, (1,), 20),
        pod("c", b, (0,), 25),
        pod("d", b, (1,), 100),
        pod("e", c, (0,), 40),
        pod("f", c, (1,), 60),
        pod("g", b, (2,), 80),
    ]


def write_snapshot(path: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    state = build_state(nodes, pods)
    path.write_text(json.dumps(make_snapshot(nodes, pods, state, cluster_metrics(state, mix_from_state(state)), "t")))
    return str(path)


@pytest.fixture(scope="session")
def browser() -> Path:
    found = chromium.find()
    if found is None:
        msg = f"no Chromium to render the report: {chromium.HINT} (`make test` does, as root)"
        unavailable(msg)
    return found


@pytest.fixture
def snapshot(tmp_path: Path) -> str:
    return write_snapshot(tmp_path / "cluster.json", cluster_nodes(NODES), fragmented_pods(NATURAL))


def plan_with_report(snapshot: str, out: Path, *extra: str) -> dict[str, Any]:
    """`plan -o json --report out`: the plan document (stdout is untouched by the report)."""
    result = CliRunner().invoke(cli, ["plan", "--snapshot", snapshot, "--report", str(out), "-o", "json", *extra])
    assert result.exit_code == 0, (result.output, result.exception)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


# ---- reading the rendered DOM back ------------------------------------------------------------
@dataclass
class Panel:
    cells: list[tuple[str, float, float]] = field(default_factory=list)  # (colour step, x, y) absolute
    marks: list[tuple[str, float, float]] = field(default_factory=list)  # ("emptied"|"taken", x, y)
    nodes: list[str] = field(default_factory=list)  # the node groups' <title>s, in document order
    labels: list[str] = field(default_factory=list)  # row labels


class Dom(HTMLParser):
    """The report's panels as Chromium serialized them: cells, outlines and names, with the
    translate() offsets of their groups added up (screen coordinates for the pixel checks)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.panels: dict[str, Panel] = {}
        self.stack: list[tuple[str, float, float, str | None]] = []  # tag, dx, dy, panel
        self.tags: list[str] = []
        self.text: list[str] = []
        self._capture: str | None = None

    def _offset(self) -> tuple[float, float, str | None]:
        x = sum(s[1] for s in self.stack)
        y = sum(s[2] for s in self.stack)
        panel = next((s[3] for s in reversed(self.stack) if s[3]), None)
        return x, y, panel

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        m = re.match(r"translate\(([-\d.]+)[ ,]([-\d.]+)\)", a.get("transform", ""))
        dx, dy = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
        panel = a["id"] if tag == "g" and a.get("id") in ("before", "after") else None
        if panel:
            self.panels[panel] = Panel()
        x0, y0, current = self._offset()
        if tag == "use" and current:
            ref = a["href"].lstrip("#")
            where = (ref, x0 + float(a["x"]), y0 + float(a["y"]))
            (self.panels[current].marks if ref in ("emptied", "taken") else self.panels[current].cells).append(where)
        if tag == "title" or (tag == "text" and a.get("class") == "l"):
            self._capture = f"{tag}:{current}"
        if tag not in ("use", "rect", "meta", "br"):  # void in the serialization: no end tag follows
            self.stack.append((tag, dx, dy, panel))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and tag in (s[0] for s in self.stack):
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._capture:
            kind, panel = self._capture.split(":")
            if panel in self.panels:
                p = self.panels[panel]
                (p.nodes if kind == "title" else p.labels).append(data)
            self._capture = None


def dump(browser: Path, file: Path, tmp_path: Path) -> Dom:
    dom = Dom()
    dom.feed(chromium.render(browser, file.as_uri(), tmp_path / "profile", "--dump-dom"))
    return dom


# ---- reading the screenshot back (a PNG decoder: the venv has no Pillow) ----------------------
def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            head = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", head)
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    out, prev = bytearray(), bytearray(stride)
    for r in range(height):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        out += line
        prev = line
    return width, height, bpp, bytes(out)


@dataclass
class Shot:
    width: int
    height: int
    bpp: int
    data: bytes

    def rgb(self, x: float, y: float) -> tuple[int, int, int]:
        i = (int(y) * self.width + int(x)) * self.bpp
        return self.data[i], self.data[i + 1], self.data[i + 2]


def screenshot(browser: Path, file: Path, tmp_path: Path) -> Shot:
    size = re.search(r'<svg[^>]* width="([\d.]+)" height="([\d.]+)"', file.read_text())
    assert size, "the report has no sized <svg>"
    w, h = int(float(size.group(1))) + 1, int(float(size.group(2))) + 1
    png = tmp_path / "shot.png"
    chromium.render(browser, file.as_uri(), tmp_path / "profile", f"--screenshot={png}", f"--window-size={w},{h}")
    return Shot(*decode_png(png.read_bytes()))


def hex_rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def near(a: tuple[int, int, int], b: tuple[int, int, int], tol: int = 8) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def expected_marks(snapshot: str, doc: dict[str, Any]) -> tuple[int, int]:
    """(emptied, taken) counted from the snapshot and the plan document's moves alone."""
    from hami_place_core.planning import apply_moves
    from hami_place_core.snapshot import load_snapshot

    nodes, pods, _ = load_snapshot(snapshot)
    before = build_state(nodes, pods)
    after = apply_moves(before, moves_of(doc))
    used = [
        (n.usage[g.uuid].used > 0, after.nodes[name].usage[g.uuid].used > 0)
        for name, n in before.nodes.items()
        for g in n.devices
    ]
    return sum(b and not a for b, a in used), sum(a and not b for b, a in used)


# ---- the tests ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ext", ["html", "svg"])
def test_chromium_renders_both_panels_with_every_gpu_and_node(
    browser: Path, snapshot: str, tmp_path: Path, ext: str
) -> None:
    out = tmp_path / f"plan.{ext}"
    doc = plan_with_report(snapshot, out)
    assert doc["kind"] == "HamiPlacementPlan" and doc["gpusFreed"] > 0, doc  # the fixture frees GPUs
    dom = dump(browser, out, tmp_path)
    assert set(dom.panels) == {"before", "after"}
    gpus = sum(NODES.values())
    emptied, taken = expected_marks(snapshot, doc)
    assert emptied - taken == doc["gpusFreed"]
    for name, panel in dom.panels.items():
        assert len(panel.cells) == gpus, name  # one cell per GPU in each panel
        assert panel.nodes == NATURAL, name  # every node, natural order (2 before 10)
        assert " ".join(panel.labels).startswith("gpu-node-1"), panel.labels
        assert [m[0] for m in panel.marks].count("emptied") == emptied, name
        assert [m[0] for m in panel.marks].count("taken") == taken, name
    # every mark sits on a cell; an emptied GPU is used before and free after
    before = {(x, y): s for s, x, y in dom.panels["before"].cells}
    after = {(x, y): s for s, x, y in dom.panels["after"].cells}
    for kind, x, y in dom.panels["after"].marks:
        assert (after[(x, y)] == "s0") == (kind == "emptied"), (kind, x, y)
    for kind, x, y in dom.panels["before"].marks:
        assert (before[(x, y)] == "s0") == (kind == "taken"), (kind, x, y)
    text = " ".join(dom.text)
    assert f"{len(doc['moves'])} moves free {doc['gpusFreed']} whole GPUs" in text  # the Plan's figures
    b, a = doc["before"], doc["after"]
    assert f"whole GPUs free {b['wholeGpusFree']} → {a['wholeGpusFree']}" in text
    assert f"FGD {b['fgd']:.2f} → {a['fgd']:.2f}" in text
    assert f"emptied by the plan ({emptied})" in text and "unhealthy or cordoned" in text  # the legend
    assert "script" not in dom.tags


def test_a_freed_gpu_changes_colour_in_the_screenshot(browser: Path, snapshot: str, tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    plan_with_report(snapshot, out)
    dom = dump(browser, out, tmp_path)
    shot = screenshot(browser, out, tmp_path)
    before, after = dom.panels["before"], dom.panels["after"]
    shift = after.cells[0][1] - before.cells[0][1]  # the after panel: the same layout, further right
    assert shift > 0 and all(a[1:] == (b[1] + shift, b[2]) for a, b in zip(after.cells, before.cells, strict=True))
    free, blue = hex_rgb(report.COLORS[0]), hex_rgb(report.EMPTIED_COLOR)
    emptied = [(x, y) for kind, x, y in after.marks if kind == "emptied"]
    assert emptied
    for x, y in emptied:
        centre_after = shot.rgb(x + report.CELL / 2, y + report.CELL / 2)
        centre_before = shot.rgb(x - shift + report.CELL / 2, y + report.CELL / 2)
        assert near(centre_after, free), centre_after  # free after the moves
        assert not near(centre_before, centre_after, 40), (centre_before, centre_after)  # in use before
        assert near(shot.rgb(x - 1, y + report.CELL / 2), blue, 40)  # outlined, in both panels
        assert near(shot.rgb(x - shift - 1, y + report.CELL / 2), blue, 40)
    # every other cell shows its step's colour in each panel: a GPU whose share did not change
    # looks the same before and after; unhealthy and cordoned ones are grey
    marked = {(x, y) for _, x, y in after.marks}
    steady = [(s, x, y) for s, x, y in after.cells if (x, y) not in marked]
    for (s, x, y), (s0, x0, y0) in zip(after.cells, before.cells, strict=True):
        if (x, y) in marked:
            continue
        c, c0 = shot.rgb(x + report.CELL / 2, y + report.CELL / 2), shot.rgb(x0 + report.CELL / 2, y0 + report.CELL / 2)
        assert near(c, hex_rgb(report.COLORS[int(s[1:])])) and near(c0, hex_rgb(report.COLORS[int(s0[1:])])), (s, c)
        assert near(c, c0, 2) == (s == s0)
    assert any(s == f"s{report.UNHEALTHY}" for s, _, _ in steady)


def test_hostile_node_names_are_text_not_markup(browser: Path, tmp_path: Path) -> None:
    names = {HOSTILE: 4, "gpu-node-3": 4, "gpu-node-20": 4}
    snap = write_snapshot(tmp_path / "hostile.json", cluster_nodes(names), fragmented_pods(list(names)))
    for ext in ("html", "svg"):
        out = tmp_path / f"plan.{ext}"
        plan_with_report(snap, out)
        dom = dump(browser, out, tmp_path)
        assert "script" not in dom.tags and "b" not in dom.tags, dom.tags
        # natural order reads the hostile name as gpu-node-7...: between 3 and 20
        assert dom.panels["before"].nodes == ["gpu-node-3", HOSTILE, "gpu-node-20"] == dom.panels["after"].nodes
        raw = out.read_text()
        assert HOSTILE not in raw and "<script" not in raw and "<b>" not in raw  # escaped in the file itself


def test_the_report_is_self_contained_and_follows_the_extension(snapshot: str, tmp_path: Path) -> None:
    for ext, start in (("html", "<!DOCTYPE html>"), ("svg", '<?xml version="1.0"'), ("SVG", '<?xml version="1.0"')):
        out = tmp_path / f"plan.{ext}"
        plan_with_report(snapshot, out)
        text = out.read_text()
        assert text.startswith(start)
        links = re.findall(r"(?:src|href)\s*=\s*\"([^\"]*)\"|url\(|@import|https?://(?!www\.w3\.org/2000/svg)", text)
        assert all(link.startswith("#") for link in links), links  # only references inside the file
    html = (tmp_path / "plan.html").read_text()
    assert "default-src 'none'" in html and "<script" not in html


def test_usage_and_write_errors(snapshot: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", snapshot, "--report", str(tmp_path / "plan.png")]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "'--report'" in err.err and "must end in .html or .svg" in err.err
    assert (
        main(["plan", "--snapshot", snapshot, "--report", str(tmp_path / "plan.html"), "--for-request", "gpus=1"]) == 2
    )
    assert "cannot be combined with --for" in capsys.readouterr().err
    missing = tmp_path / "no-such-dir" / "plan.svg"
    assert main(["plan", "--snapshot", snapshot, "--report", str(missing)]) == 1
    err = capsys.readouterr()
    assert err.err.strip() == f"error: cannot write the report {missing}: No such file or directory"
    assert err.out == ""  # fails before printing the plan: no half-done command
    (tmp_path / "dir.html").mkdir()
    assert main(["plan", "--snapshot", snapshot, "--report", str(tmp_path / "dir.html")]) == 1
    assert "cannot write the report" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["table", "json", "yaml", "jsonpath={.gpusFreed}"])
def test_every_output_still_prints_with_a_report(snapshot: str, tmp_path: Path, output: str) -> None:
    plain = CliRunner().invoke(cli, ["plan", "--snapshot", snapshot, "-o", output])
    out = tmp_path / "plan.svg"
    both = CliRunner().invoke(cli, ["plan", "--snapshot", snapshot, "-o", output, "--report", str(out)])
    assert both.exit_code == 0 == plain.exit_code and out.stat().st_size > 0
    strip = re.compile(r"planned in [\d.]+s|\"seconds\": [\d.]+")
    assert strip.sub("", both.stdout) == strip.sub("", plain.stdout)


def test_colour_steps_are_the_text_heatmaps() -> None:
    state = build_state(cluster_nodes(NODES), fragmented_pods(NATURAL))
    for n in state.nodes.values():
        for g in n.devices:
            cell = _cell(n, g.uuid)
            assert report.step(n, g.uuid) == (report.UNHEALTHY if cell == UNHEALTHY else SHADES.index(cell))


def test_a_large_cluster_draws_the_touched_nodes_and_says_so(
    snapshot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report, "MAX_FULL_GPUS", 8)
    out = tmp_path / "plan.svg"
    doc = plan_with_report(snapshot, out)
    touched = {m["from"]["node"] for m in doc["moves"]} | {m["to"]["node"] for m in doc["moves"]}
    dom = Dom()
    dom.feed(out.read_text())
    hidden = [n for n in NATURAL if n not in touched]
    assert hidden and dom.panels["after"].nodes == [n for n in NATURAL if n in touched]
    text = " ".join(dom.text)
    assert f"the other {len(hidden)} nodes ({4 * len(hidden)} GPUs) keep their layout" in text


def test_the_1213_node_example_stays_small_and_complete(tmp_path: Path) -> None:
    out = tmp_path / "example.html"
    doc = plan_with_report("example", out)
    text = out.read_text()
    assert out.stat().st_size < 1_000_000
    dom = Dom()
    dom.feed(text)
    for panel in dom.panels.values():
        assert len(panel.cells) == 6212 and len(panel.nodes) == 1213
        kinds = [m[0] for m in panel.marks]
        assert kinds.count("emptied") - kinds.count("taken") == doc["gpusFreed"] > 0
    assert dom.panels["before"].nodes[:3] == ["openb-node-0000", "openb-node-0001", "openb-node-0002"]


def test_text_escapes_markup_and_replaces_what_xml_cannot_hold() -> None:
    assert report.text('<b a="1">\x01&\'') == "&lt;b a=&quot;1&quot;&gt;\ufffd&amp;&#x27;"
