"""`make demo` (scripts/demo.py) on a real repository whose history holds a credential-like commit
message: it must finish, store that note redacted, and answer its questions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memsafe import api

DEMO = Path(__file__).resolve().parents[1] / "scripts" / "demo.py"


def test_demo_remembers_a_history_with_a_credential_redacted(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    for message in ("embed: tokenize once, length-sorted batches",
                    "safety: prose secrets ('the db password is Xk9#mP2qL7vR') are now refused"):
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", message], check=True, env=env)
    db = tmp_path / "demo.db"
    r = subprocess.run([sys.executable, str(DEMO), str(repo)], capture_output=True, text=True, timeout=300,
                       env={**env, "MEMSAFE_DB": str(db)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2 new memories" in r.stdout and "Traceback" not in r.stderr
    contents = [m.content for m in api.list_memories(api.open_store(str(db)).store, all_projects=True)]
    assert any("[REDACTED:" in c for c in contents)
    assert not any("Xk9#mP2qL7vR" in c for c in contents)
