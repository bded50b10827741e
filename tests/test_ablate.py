"""`memsafe bench --ablate` on a tiny corpus, and the kind, source and voice a question asks for."""

from __future__ import annotations

import json

from rich.console import Console

from memsafe.bench import ablate
from memsafe.recall import scoring, terms
from memsafe.recall.candidates import Candidate


def test_a_question_naming_a_kind_a_source_or_in_the_first_person_weighs_them():
    q = terms.parse_query("what did we decide about the session cache?", None)  # type: ignore[arg-type]
    assert (q.kinds, q.sources, q.own_voice) == ({"decision"}, frozenset(), True)
    assert terms.parse_query("which commit dropped the cache", None).sources == {"git"}  # type: ignore[arg-type]
    cands = [Candidate(1, kind="decision", source="user"), Candidate(2, kind="general", source="git"),
             Candidate(3, kind="fact", source="agent")]
    out = scoring.asked_for({1: 1.0, 2: 1.2, 3: 1.0}, cands, q, 0.5, 0.5)
    assert out == {1: 1.5, 2: 0.6, 3: 1.0}
    plain = terms.parse_query("session cache size", None)  # type: ignore[arg-type]
    same = {1: 1.0, 2: 1.2}
    assert scoring.asked_for(same, cands, plain, 0.5, 0.5) is same  # nothing asked: unchanged
    commit = terms.parse_query("which commit did we revert", None)  # type: ignore[arg-type]
    assert scoring.asked_for({2: 1.0}, cands, commit, 0.5, 0.5) == {2: 1.5}  # named: not damped as history


def test_ablate_turns_each_signal_off_on_a_tiny_corpus(cli, tmp_path):
    corpus = {"name": "tiny", "memories": [
        {"id": "a", "content": "What cache should the session store use?", "kind": "conversation"},
        {"id": "b", "content": "We decided: the session store uses Redis as its cache.", "kind": "decision"},
        {"id": "c", "content": "git commit 1a2b3c4 on main: session store cache in Redis", "source": "git",
         "tags": ["commit"]}],
        "queries": [{"id": "q", "type": "fact", "query": "what cache did we decide the session store uses?",
                     "relevant": ["b"]}]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(corpus), encoding="utf-8")
    r = cli("bench", "--ablate", "--corpus", str(path), "--json")
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    row = report["corpora"]["corpus"]
    assert set(row["off"]) == set(report["signals"]) >= {"question damping", "kind/source asked", "IDF coverage"}
    assert row["default"]["hybrid"]["recall_at_1"] == 1.0 and 0.0 <= row["bm25"]["recall_at_5"] <= 1.0
    for signal, modes in row["off"].items():
        assert set(modes) == {"lexical", "hybrid"}, signal
    console = Console(width=100, record=True)
    console.print(ablate.ablation_table(report))
    shown = console.export_text()
    assert "question damping" in shown and "bm25" in shown and "+0.0/+0.0" in shown
    bad = cli("bench", "--ablate", "--corpus", str(tmp_path / "missing.json"))
    assert bad.exit_code == 1 and "Traceback" not in bad.stderr
