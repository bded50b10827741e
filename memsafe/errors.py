"""Responsibility: the one exception hierarchy handlers raise.

Every message is written for the person (or model) who will read it: what went wrong and,
where there is one, what to do. The CLI maps these to one line on stderr and exit code 1;
the MCP server turns them into tool errors.
"""

from __future__ import annotations


class MemsafeError(Exception):
    """Base class: a failure the user can understand and act on."""

    exit_code = 1


class InvalidInput(MemsafeError):
    """An argument is malformed or out of range."""


class InvalidTime(InvalidInput):
    """A time typed by a person (`--since`, `--as-of`, MCP `as_of`) that names no instant: a
    usage error (exit code 2)."""

    exit_code = 2


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
