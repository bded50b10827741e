"""Write memsafe/data/common_words.txt: the whole English words of the shipped embedding model's
WordPiece vocabulary (tokenizer.json of all-MiniLM-L6-v2, uncased, ~21,000 words of 3+ ASCII
letters), one per line, sorted.

Entity extraction reads it to tell a name at the start of a sentence ("Postgres keeps ...") from
an ordinary word there ("Keeps ...", "Deploy ..."): a word the vocabulary holds whole is common
enough to be a plain word; product and tool names (postgres, redis, kubernetes) are not in it.

    python scripts/gen_common_words.py
"""

from __future__ import annotations

import json
from pathlib import Path

from memsafe.embed import model_files

OUT = Path(__file__).resolve().parent.parent / "memsafe" / "data" / "common_words.txt"


def main() -> None:
    _model, tokenizer = model_files()
    vocab = json.loads(Path(tokenizer).read_text(encoding="utf-8"))["model"]["vocab"]
    words = sorted(w for w in vocab if w.isascii() and w.isalpha() and len(w) >= 3)
    OUT.write_text("\n".join(words) + "\n", encoding="utf-8")
    print(f"{len(words)} words -> {OUT}")


if __name__ == "__main__":
    main()
