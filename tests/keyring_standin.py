"""A stand-in for a secure OS keyring (macOS Keychain, Secret Service, ...) in tests, which run
where no such service is: a `keyring` backend with the priority of one (5) and no `file_path`,
so memsafe judges it as it judges those. Its entries are kept in the JSON file named by
MEMSAFE_TEST_KEYRING (in the test's own folder), so every memsafe process of a test shares them.

Select it with PYTHON_KEYRING_BACKEND=keyring_standin.Keyring and this folder on PYTHONPATH
(tests/test_encryption.py's `os_keyring` fixture does both).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

STORE_ENV = "MEMSAFE_TEST_KEYRING"


class Keyring(KeyringBackend):
    """Entries {service: {user: secret}} in the file named by MEMSAFE_TEST_KEYRING."""

    priority = 5

    @staticmethod
    def _where() -> Path:
        return Path(os.environ[STORE_ENV])

    def _entries(self) -> dict:
        try:
            return json.loads(self._where().read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _save(self, entries: dict) -> None:
        self._where().write_text(json.dumps(entries), encoding="utf-8")

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(service, {}).get(username)

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries.setdefault(service, {})[username] = password
        self._save(entries)

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        if username not in entries.get(service, {}):
            raise PasswordDeleteError(f"no entry for {username}")
        del entries[service][username]
        self._save(entries)


class Forgetful(Keyring):
    """A backend that accepts a key and keeps nothing (as a broken or locked service may)."""

    def set_password(self, service: str, username: str, password: str) -> None:
        pass
