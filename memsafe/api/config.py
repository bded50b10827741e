"""Responsibility: the config handlers (`memsafe config`): every key memsafe keeps in a store, its
effective value (stored, else default), setting and resetting one, and the database path saved in
the user config file.

`CONFIG_KEYS` gathers the keys from the modules that read them: recall's (`recall.weights.KEYS`:
budget, packing and ranking), then near-duplicates, the decay policy, project detection and the
agent hooks.
"""

from __future__ import annotations

from pathlib import Path

from memsafe import clock, embed, settings
from memsafe.errors import InvalidInput, Refused
from memsafe.recall import weights
from memsafe.settings import ConfigKey
from memsafe.store import Store

__all__ = [
    "CONFIG_KEYS", "config_value", "config_list", "config_get", "config_set", "config_reset", "check_config_pair",
    "set_db_path", "reset_db_path",
]

CONFIG_KEYS: dict[str, ConfigKey] = {
    **weights.KEYS,
    **{k.name: k for k in [
        ConfigKey(
            "near_duplicate_threshold", float, 0.92,
            "cosine similarity at which remember reports a near-duplicate and consolidate merges", 0.5, 1.0,
        ),
        ConfigKey(
            "decay_policy", str, "",
            "overrides of the decay policy table, e.g. 'fact.half_life=150, task.floor=0.1' "
            "(see `memsafe decay --policy`)",
            check=lambda v: _check_decay_policy(v),
        ),
        ConfigKey(
            "project_mode",
            str,
            "git-root",
            "how the current project is found: git-root (repository root of the cwd) or cwd",
            choices=("git-root", "cwd"),
        ),
        ConfigKey(
            "embed_model", str, embed.DEFAULT_MODEL,
            "the embedding model of this store's vectors (docs/embedders.md); changed only by "
            "`memsafe embed --model NAME`, which re-embeds every memory with it",
            choices=tuple(embed.MODELS),
        ),
    ]},
    # the agent hooks' (`memsafe.api.agent`); here, not in `memsafe.capture`: a hook that injects never loads capture
    **{k.name: k for k in [
        ConfigKey("hook_brief_budget", int, 600, "tokens the agent hook injects at session start (cl100k_base)",
                  50, 20_000),
        ConfigKey("hook_prompt_budget", int, 400, "tokens the agent hook injects with a prompt (cl100k_base)",
                  50, 20_000),
        # chosen on data (scripts/tune_hook_floor.py): the lowest floor at which at most 1% of
        # prompts unrelated to a project inject anything there (keyword: 56% of probing questions
        # get their memory, 0.8% of unrelated prompts something; hybrid: 70%, 0.8%)
        ConfigKey("hook_relevance_floor", float, 3.5,
                  "recall score a memory needs to be injected with a prompt, keyword search (a full keyword "
                  "match scores about 16)", 0.0, 100.0),
        ConfigKey("hook_relevance_floor_hybrid", float, 1.25,
                  "recall score a memory needs to be injected with a prompt, hybrid search (in a process that "
                  "holds the model already)", 0.0, 100.0),
        ConfigKey("hook_capture_max", int, 20, "statements the agent hooks capture per session at most", 0, 1000),
    ]},
}


def _check_decay_policy(value):
    from memsafe import decay  # only when the key is set: a recall never loads the decay policy

    return decay.check_policy(value)


def config_value(store: Store, key: str):
    """The effective value of a config key (stored, else default)."""
    spec = CONFIG_KEYS[key]
    raw = store.config_get(key)
    return spec.default if raw is None else spec.parse(raw)


def _config_snapshot(store: Store) -> dict:
    """Every config key's effective value, read in one query (recall reads ~18 of them)."""
    stored = store.config_items()
    return {
        name: spec.parse(stored[name]) if name in stored else spec.default
        for name, spec in CONFIG_KEYS.items()
    }


def default_config() -> dict:
    """Every config key's default value."""
    return {name: spec.default for name, spec in CONFIG_KEYS.items()}


def config_list(store: Store) -> dict[str, dict]:
    """Every config key: {value, default, help}."""
    stored = store.config_items()
    out = {}
    for name, spec in CONFIG_KEYS.items():
        value = spec.parse(stored[name]) if name in stored else spec.default
        out[name] = {"value": value, "default": spec.default, "help": spec.help}
    return out


def config_get(store: Store, key: str):
    """One config value. Raises InvalidInput for an unknown key (naming the known ones)."""
    _config_spec(key)
    return config_value(store, key)


def config_set(store: Store, key: str, value: str):
    """Validate and store a config value; returns the parsed value. Raises InvalidInput."""
    spec = _config_spec(key)
    parsed = spec.parse(value)
    with store.write():
        check_config_pair(store, key, parsed)
        store.config_set(key, str(parsed))
        store.add_event(clock.now_iso(), "config", None, key)
    return parsed


def check_config_pair(store: Store, key: str, parsed) -> None:
    """Refuse a value that, with the store's current config, leaves recall nothing to rank: the
    fusion weights cannot both be 0; and any change of `embed_model`, which only `memsafe embed
    --model` makes (with the vectors). Every way a config key is set goes through here (set, reset, import).

    Raises: InvalidInput."""
    if key == "embed_model" and parsed != (store.config_get(key) or embed.DEFAULT_MODEL):
        raise Refused(f"embed_model names the model that made this store's vectors: "
                      f"`memsafe embed --model {parsed}` re-embeds every memory with it and sets it")
    partner = {"weight_lexical": "weight_vector", "weight_vector": "weight_lexical"}.get(key)
    if partner and parsed == 0 and _config_snapshot(store)[partner] == 0:
        raise Refused(f"{key} and {partner} cannot both be 0: recall would rank nothing; "
                           f"raise {partner} first")


def config_reset(store: Store, key: str):
    """Return a key to its default. Raises InvalidInput for an unknown key."""
    spec = _config_spec(key)
    check_config_pair(store, key, spec.default)
    with store.write():
        store.config_delete(key)
        store.add_event(clock.now_iso(), "config", None, f"{key} reset")
    return spec.default


def _config_spec(key: str) -> ConfigKey:
    spec = CONFIG_KEYS.get(key)
    if spec is None:
        shown = repr(key) if len(repr(key)) <= 40 else repr(key)[:39] + "…"  # never echo megabytes
        raise InvalidInput(f"unknown config key {shown}; known keys: {', '.join(CONFIG_KEYS)}, db")
    return spec


def set_db_path(path: str) -> Path | str:
    """Remember a DB path in the user config file (resolved to an absolute path now, so later
    runs from any working directory use the same file), or a PostgreSQL URL (checked: libpq
    syntax, no password in it). Returns what was saved.

    Raises: InvalidInput."""
    if settings.is_db_url(path):
        from memsafe.store.postgres import check_url

        url = path.strip()
        check_url(url)
        values = settings.read_user_config()
        values["db"] = url
        settings.write_user_config(values)
        return url
    resolved = settings.expand_path(path)
    if resolved.is_dir():
        raise Refused(f"{resolved} is a directory; give the path of a database file inside it")
    values = settings.read_user_config()
    values["db"] = str(resolved)
    settings.write_user_config(values)
    return resolved


def reset_db_path() -> Path | str:
    """Forget the DB path saved by `set_db_path`; returns the path used from now on (by default)."""
    values = settings.read_user_config()
    if values.pop("db", None) is not None:
        settings.write_user_config(values)
    return settings.resolve_db_path()[0]
