"""Responsibility: pure geometry for the page's pictures: bar charts and the radial layout of a
knowledge-graph neighbourhood, computed on the server so the browser draws plain inline SVG
(no script, no library). Units are SVG user units (the viewBox scales them to the page)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memsafe.models import GraphView


@dataclass
class Bar:
    """One bar: `label`, `value`, and its rectangle (x, y, w, h)."""

    label: str
    value: int
    x: float
    y: float
    w: float
    h: float


def hbars(items: Sequence[tuple[str, int]], *, width: float = 420.0, row: float = 26.0,
          label_w: float = 150.0) -> tuple[list[Bar], float]:
    """Horizontal bars, one per (label, value), scaled to the largest value. Returns (bars,
    total height). The bar area starts at `label_w` and is `width - label_w - 60` wide (the
    rest holds the value)."""
    top = max((v for _, v in items), default=0) or 1
    area = width - label_w - 60
    bars = [Bar(str(label), int(value), label_w, i * row + 4, max(1.0 if value else 0.0, area * value / top), row - 8)
            for i, (label, value) in enumerate(items)]
    return bars, max(row * len(items), row)


def columns(items: Sequence[tuple[str, int]], *, width: float = 1000.0, height: float = 150.0) -> list[Bar]:
    """Vertical columns over a time axis, one per (day, value), scaled to the largest value.
    `y` is the top of each column; the baseline is `height`."""
    top = max((v for _, v in items), default=0) or 1
    step = width / max(len(items), 1)
    out = []
    for i, (label, value) in enumerate(items):
        h = (height - 8) * value / top
        out.append(Bar(str(label), int(value), i * step + 1, height - h, max(step - 2, 1.0), h))
    return out


@dataclass
class Node:
    """A placed entity: centre (x, y), distance from the root, and how many memories name it."""

    name: str
    type: str
    distance: int
    memories: int
    x: float
    y: float
    r: float = 10.0
    lx: float = 0.0  # label position and text-anchor: outward from the centre, clear of the edges
    ly: float = 0.0
    anchor: str = "middle"


@dataclass
class Edge:
    """A relation drawn from (x1, y1) to (x2, y2), labelled at its middle (mx, my)."""

    source: str
    relation: str
    target: str
    x1: float
    y1: float
    x2: float
    y2: float
    mx: float
    my: float


def radial(view: GraphView, *, size: float = 720.0) -> tuple[list[Node], list[Edge]]:
    """Radial layout of a `graph_show` view: the root in the centre, entities one hop away
    evenly on an inner ring, two hops away on an outer ring, each placed in the angular sector
    of the first inner entity it is related to (so related nodes sit close together)."""
    c = size / 2
    rings = {1: size * 0.26, 2: size * 0.43}
    by_name = {n.entity.name: n for n in view.nodes}
    first = [n for n in view.nodes if n.distance == 1]
    second = [n for n in view.nodes if n.distance >= 2]
    angle: dict[str, float] = {}
    sector = 2 * math.pi / max(len(first), 1)
    for i, n in enumerate(first):
        angle[n.entity.name] = -math.pi / 2 + i * sector
    parent: dict[str, str] = {}
    for r in view.relations:
        for end, other in ((r.source, r.target), (r.target, r.source)):
            if end in by_name and other in angle and by_name[end].distance >= 2:
                parent.setdefault(end, other)
    groups: dict[str | None, list[str]] = {}
    for n in second:
        groups.setdefault(parent.get(n.entity.name), []).append(n.entity.name)
    orphans = groups.pop(None, [])
    for p, names in groups.items():
        assert p is not None  # the orphans' group (None) was popped above
        span = sector * 0.9
        for j, name in enumerate(names):
            offset = 0.0 if len(names) == 1 else -span / 2 + span * j / (len(names) - 1)
            angle[name] = angle[p] + offset
    for j, name in enumerate(orphans):
        angle[name] = -math.pi / 2 + (j + 0.5) * 2 * math.pi / len(orphans)
    nodes = []
    for n in view.nodes:
        if n.distance == 0:
            x, y = c, c
        else:
            ring = rings[min(n.distance, 2)]
            x, y = c + ring * math.cos(angle[n.entity.name]), c + ring * math.sin(angle[n.entity.name])
        radius = 22.0 if n.distance == 0 else 9.0 + min(n.entity.memories, 12)
        node = Node(n.entity.name, n.entity.type, n.distance, n.entity.memories, round(x, 1), round(y, 1), radius)
        node.lx, node.ly, node.anchor = _label_at(node, c)
        nodes.append(node)
    at = {n.name: n for n in nodes}
    edges = []
    for r in view.relations:
        a, b = at.get(r.source), at.get(r.target)
        if a is None or b is None:
            continue
        length = math.hypot(b.x - a.x, b.y - a.y) or 1.0
        ux, uy = (b.x - a.x) / length, (b.y - a.y) / length  # lines stop at the circles, so arrowheads show
        edges.append(Edge(r.source, r.relation, r.target, round(a.x + ux * a.r, 1), round(a.y + uy * a.r, 1),
                          round(b.x - ux * (b.r + 2), 1), round(b.y - uy * (b.r + 2), 1),
                          round((a.x + b.x) / 2, 1), round((a.y + b.y) / 2, 1)))
    return nodes, edges


def _label_at(node: Node, c: float) -> tuple[float, float, str]:
    """Where a node's label goes: above the root; for the others, just outside the circle on the
    side away from the centre (edges reach a ring node from the inside, so they stay visible)."""
    if node.distance == 0:
        return node.x, round(node.y - node.r - 8, 1), "middle"
    dx, dy = node.x - c, node.y - c
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    if abs(ux) > 0.35:
        gap = node.r + 6
        return round(node.x + ux * gap, 1), round(node.y + uy * gap + 4, 1), "start" if ux > 0 else "end"
    return node.x, round(node.y + (node.r + 16 if uy > 0 else -node.r - 8), 1), "middle"
