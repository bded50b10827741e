"""Choose the prompt hook's relevance floor (config `hook_relevance_floor`) on data: the probing
questions of the bench's "prompts" corpus (users' prompts to a coding assistant, and questions
about what they said) should bring their memory along; prompts unrelated to any project (UNRELATED,
asked in every project of the corpus) should bring nothing.

For each floor: the hit rate (probing questions whose relevant memory is injected: among the
recall hits scoring at least the floor, within the hook's budget) and the false injection rate
(unrelated prompt x project pairs that inject anything). Both recall modes the hook may use.

Usage: .venv/bin/python scripts/tune_hook_floor.py [--json]   (a temporary store; the model is
loaded once, for the hybrid column and to embed the corpus)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

# Written for this tuning, none about any corpus project: chat, arithmetic, editing requests,
# general programming questions, thanks. Kept in the test suite too (tests/test_agent_hooks.py).
UNRELATED = [
    "fix the typo in this sentence",
    "what's 2+2",
    "thanks!",
    "ok",
    "yes please",
    "continue",
    "great, that works",
    "can you explain that again more simply?",
    "what time is it in Tokyo?",
    "translate 'good morning' into Spanish",
    "write a haiku about autumn",
    "how do I reverse a list in Python?",
    "what does the -r flag of grep do?",
    "summarize the paragraph above in one sentence",
    "make this email sound more polite",
    "what is the capital of Australia?",
    "tell me a joke",
    "how many days are there in a leap year?",
    "convert 5 miles to kilometers",
    "what is a monad, in plain words?",
    "explain big O notation",
    "rename the variable x to count",
    "add a docstring to this function",
    "sort these names alphabetically: Zoe, Adam, Mia",
    "what's the difference between a list and a tuple?",
    "how do I exit vim?",
    "show me a regex that matches an email address",
    "undo your last change",
    "never mind, go back to the previous version",
    "why is the sky blue?",
    "write a limerick about a cat",
    "what is 17 times 23?",
    "format this JSON nicely",
    "is it going to rain tomorrow?",
    "recommend a good book on algorithms",
    "what does HTTP 418 mean?",
    "how do I center a div with CSS?",
    "please proofread: their going to the park tomorow",
    "can you shorten this paragraph?",
    "what's the square root of 144?",
    "good night",
    "hello there",
    "how are you today?",
    "explain recursion to a five year old",
    "what is the plural of octopus?",
    "list three prime numbers bigger than 100",
    "write a SQL query that counts rows in a table",
    "what's the keyboard shortcut to copy on a Mac?",
]

FLOORS = (0.0, 0.5, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0)
PROMPT_BUDGET = 400  # the hook's default (config hook_prompt_budget)


def main() -> int:
    as_json = "--json" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="memsafe-tune-floor-") as tmp:
        os.environ["MEMSAFE_HOME"] = tmp
        from memsafe import api
        from memsafe.api.agent import asks_enough, injected, recall_for_prompt
        from memsafe.bench import quality

        corpus = quality.shipped_corpus("prompts")
        opened = api.open_store(os.path.join(tmp, "tune.db"))
        store = opened.store
        try:
            with store.write():
                ids = quality.build_store(store, corpus)
            projects = sorted({m.get("project") for m in corpus["memories"]} - {None})
            table: dict[str, dict] = {}
            with quality._clock_at(corpus.get("now")):
                for mode in ("lexical", "hybrid"):
                    probing = [({ids[r] for r in q["relevant"]},
                                recall_for_prompt(store, q.get("project"), q["query"], budget=PROMPT_BUDGET, mode=mode))
                               for q in corpus["queries"]]
                    unrelated = [recall_for_prompt(store, project, prompt, budget=PROMPT_BUDGET, mode=mode)
                                 for prompt in UNRELATED for project in projects]
                    rows: dict = {"questions": len(probing), "unrelated_pairs": len(unrelated)}
                    asked = [asks_enough(q["query"]) for q in corpus["queries"]]
                    unrelated_asked = [asks_enough(prompt) for prompt in UNRELATED for _ in projects]
                    for gate in (False, True):
                        for f in FLOORS:
                            hit = sum(any(h.memory.id in relevant
                                          for h in injected(hits, floor=f, budget=PROMPT_BUDGET, now=now))
                                      for (relevant, (hits, now)), ok in zip(probing, asked) if ok or not gate)
                            false = sum(bool(injected(hits, floor=f, budget=PROMPT_BUDGET, now=now))
                                        for (hits, now), ok in zip(unrelated, unrelated_asked) if ok or not gate)
                            rows[f"{'gate ' if gate else ''}{f}"] = {
                                "hit_rate": round(hit / len(probing), 3),
                                "false_injection_rate": round(false / len(unrelated), 3)}
                    table[mode] = rows
                    pairs = [(prompt, project) for prompt in UNRELATED for project in projects]
                    worst = sorted(((max(h.score for h in hits), prompt, project, hits[0].memory.content[:70])
                                    for (prompt, project), (hits, _) in zip(pairs, unrelated)
                                    if hits and asks_enough(prompt)), reverse=True)
                    rows["worst_unrelated"] = [f"{sc:.2f} {p!r} in {pr}: {c!r}" for sc, p, pr, c in worst[:12]]
        finally:
            store.close()
    if as_json:
        print(json.dumps(table, indent=1))
        return 0
    for mode, rows in table.items():
        print(f"{mode}: {rows['questions']} probing questions, {rows['unrelated_pairs']} unrelated prompt x project")
        print("| floor | hit rate (probing) | false injections (unrelated) | with the word gate: hit rate | false |")
        print("|---:|---:|---:|---:|---:|")
        for f in FLOORS:
            r, g = rows[str(f)], rows[f"gate {f}"]
            print(f"| {f:g} | {r['hit_rate']:.1%} | {r['false_injection_rate']:.1%} | {g['hit_rate']:.1%} "
                  f"| {g['false_injection_rate']:.1%} |")
        print("unrelated prompts the word gate lets through, scoring highest:", *rows["worst_unrelated"], sep="\n  ")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
