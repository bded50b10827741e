"""Responsibility: the one exception hierarchy handlers raise.

Every message is written for the person (or model) who will read it: what went wrong and,
where there is one, what to do. The CLI maps these to one line on stderr and the class's
`exit_code`; the MCP server turns them into tool errors.

Exit codes follow the convention of Click's own usage errors and of most command-line tools:

- 2, a usage error (`InvalidInput`): the command line is wrong on its face, whatever the store,
  the files or the machine hold: a malformed or out-of-range value, an empty argument, an unknown
  choice, options that cannot go together. Fix the command line.
- 1, a refusal or not-found (`Refused`, `NotFound`, `Duplicate`, `SecretDetected`,
  `SchemaTooNew`, `StoreUnavailable`): the command line is fine, but what it names or the state
  it meets says no: a memory that is already forgotten, a file that exists or cannot be read, a
  secret in the content, a store that is locked or too new.
"""

from __future__ import annotations


class MemsafeError(Exception):
    """Base class: a failure the user can understand and act on."""

    exit_code = 1


class InvalidInput(MemsafeError):
    """A usage error: an argument is malformed, empty, out of range or an unknown choice, or two
    arguments cannot go together; knowable from the request alone. Exit code 2."""

    exit_code = 2


class Refused(InvalidInput):
    """A well-formed request that the current state refuses: the memory is already in that state,
    the named file or folder is missing, exists already or cannot be read or written, git failed,
    a port is taken, a file's contents are invalid. Exit code 1.

    A subclass of InvalidInput, so code that treats both alike (the web page's 400, the MCP tool
    error) keeps doing so; only the exit code tells them apart.
    """

    exit_code = 1


class InvalidTime(InvalidInput):
    """A time typed by a person (`--since`, `--as-of`, MCP `as_of`) that names no instant, or one
    in the future: a usage error (exit code 2, as every InvalidInput)."""


class NotFound(MemsafeError):
    """No memory (or entity) with the given id or name."""


class Duplicate(MemsafeError):
    """The same content already exists in the same scope.

    Attributes:
        existing_id: id of the memory that already holds this content.
    """

    def __init__(self, message: str, existing_id: int):
        super().__init__(message)
        self.existing_id = existing_id


class SchemaTooNew(MemsafeError):
    """The database was written by a newer memsafe; it is left untouched."""


class StoreUnavailable(MemsafeError):
    """The database file cannot be opened, created or migrated."""


class SecretDetected(MemsafeError):
    """Content looks like a credential and was refused."""


def repair_hint(store: object) -> str:
    """What rebuilds a damaged derived index of `store`, for a note: `memsafe doctor --repair`,
    with write access when the store was opened to read only (its `read_only`)."""
    if getattr(store, "read_only", False):
        return ("`memsafe doctor --repair`, run with write access to the store (it is read-only here), "
                "rebuilds it from the memories")
    return "`memsafe doctor --repair` rebuilds it from the memories"


class IndexDamaged(StoreUnavailable):
    """A derived index (the word, trigram or vector index) is damaged or missing while the memories
    are intact. Recall answers from the other half meanwhile; `memsafe doctor --repair` rebuilds it.

    Attributes:
        index: 'word', 'trigram' or 'vector'.
        detail: the engine's own words for the damage (one line).
    """

    def __init__(self, index: str, detail: str):
        self.index, self.detail = index, detail
        super().__init__(f"the {index} index is damaged ({detail}); `memsafe doctor --repair` rebuilds it "
                         "from the memories")


class IndexHealed(IndexDamaged):
    """A write met a damaged word or trigram index, was rolled back (nothing of it was written),
    and the index was rebuilt from the memories: the same write can run again."""

    def __init__(self, done: str):
        self.index, self.detail = "word", done
        StoreUnavailable.__init__(self, f"the word index was damaged and memsafe {done}; nothing was written, "
                                  "run the command again")
