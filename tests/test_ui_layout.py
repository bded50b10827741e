"""Pure geometry of the page's pictures (memsafe.ui.layout): bars scale to the largest value,
the radial graph puts the root in the centre and each ring at its own radius, and edges stop at
the circles."""

from __future__ import annotations

import math

from memsafe.models import EntityInfo, GraphNode, GraphView, RelationInfo
from memsafe.ui import layout


def test_bars_scale_to_the_largest_value():
    bars, height = layout.hbars([("a", 10), ("b", 5), ("c", 0)], width=460, label_w=150)
    assert [b.w for b in bars] == [250.0, 125.0, 0.0] and height == 78
    cols = layout.columns([("d1", 0), ("d2", 4)], width=100, height=58)
    assert cols[0].h == 0 and cols[1].h == 50 and cols[1].y == 8


def _node(name, distance, memories=0):
    return GraphNode(EntityInfo(len(name), name, "entity", [], memories), distance)


def test_radial_layout_rings_and_edges():
    view = GraphView("root", 2, 30, [_node("root", 0), _node("a", 1, 3), _node("b", 1), _node("a2", 2)],
                     [RelationInfo("root", "uses", "a"), RelationInfo("b", "feeds", "root"),
                      RelationInfo("a", "has", "a2")])
    nodes, edges = layout.radial(view, size=700)
    at = {n.name: n for n in nodes}
    assert (at["root"].x, at["root"].y) == (350, 350)
    radius = {n: math.hypot(at[n].x - 350, at[n].y - 350) for n in at}
    assert abs(radius["a"] - radius["b"]) < 0.5 and radius["a2"] > radius["a"] + 100
    # a2 sits in a's sector: closer to a than to b
    assert math.dist((at["a2"].x, at["a2"].y), (at["a"].x, at["a"].y)) < math.dist(
        (at["a2"].x, at["a2"].y), (at["b"].x, at["b"].y))
    first = next(e for e in edges if e.relation == "uses")
    assert math.isclose(math.dist((first.x1, first.y1), (350, 350)), at["root"].r, abs_tol=0.2)
    assert math.dist((first.x2, first.y2), (at["a"].x, at["a"].y)) >= at["a"].r
