"""Per-memory steps stay linear on long, repetitive or unbroken text (issues 12.8 and 17.11); the
speed itself is measured by `memsafe bench --inputs`. These tests pin what the linear versions
must still compute."""

from __future__ import annotations

from memsafe import graph, tokens
from memsafe.bench import inputs


def test_token_count_of_long_text_is_exact_at_spaces_and_close_on_unbroken_runs():
    enc = tokens._encoding()
    prose = inputs.make_input("prose", 60_000)
    assert tokens.count(prose) == len(enc.encode(prose, disallowed_special=()))
    run = inputs.make_input("letters", 40_000)
    exact = len(enc.encode(run, disallowed_special=()))
    assert exact <= tokens.count(run) <= exact + 40_000 // tokens.PIECE + 1


def test_truncate_reads_only_what_it_needs_and_cuts_on_a_token_boundary():
    text = inputs.make_input("letters", 1_000_000)
    cut = tokens.truncate(text, 50)
    assert text.startswith(cut) and 0 < tokens.count(cut) <= 50
    short = "a short note"
    assert tokens.truncate(short, 50) == short


def test_entities_of_a_repeated_token_are_those_of_its_first_occurrences():
    text = "Node 1.2 " * 16_000
    names = [e.name for e in graph.extract_entities(text)]
    assert names == ["Node 1.2", "Node"]  # the version, then the name once it is not sentence-initial
    assert [e.name for e in graph.extract_entities("We run Node 1.2 here.")] == ["Node 1.2", "Node"]


def test_every_input_shape_is_made_at_the_requested_size():
    for shape in inputs.SHAPES:
        assert len(inputs.make_input(shape, 5000)) == 5000
