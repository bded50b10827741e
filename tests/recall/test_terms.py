"""The words recall reads (`memsafe.recall.terms`) agree with the word index that holds them."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from memsafe.recall import terms
from memsafe.store.common import tokenizer

# Latin, digits, FTS5 operator characters, CJK (Han, kana, Hangul), accents and spaces.
_TEXT = st.text(alphabet=st.sampled_from(list("ab Z9_.-/:@+\"*^()") + list("猫悬空指针のデータ안됨éÉ")), max_size=12)


@given(_TEXT)
@example("猫")  # a lone CJK character: no word-index term (the trigram index finds it)
@example("悬空")  # a CJK run of two: its bigram
@example("***")  # FTS5 syntax only
@example("the")  # a stop-word alone is still searched
def test_the_store_knows_when_a_text_gives_the_word_index_a_term(text):
    """sqlite's exact search looks a term up in the word index only when the query's own cutting
    (`fts_terms`) gives it a term; the store answers that without importing recall."""
    assert tokenizer.has_word_terms(text) == bool(terms.fts_terms(text))
