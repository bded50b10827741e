"""Responsibility: `memsafe config list|get|set|reset`."""

from __future__ import annotations

from typing import Annotated

import typer

from memsafe import api, settings
from memsafe.cli._common import (
    Group,
    JsonOpt,
    _emit_json,
    _errors,
    _session,
    app,
    out,
)

config_app = typer.Typer(help="Show and change settings (validated).", no_args_is_help=True, cls=Group)
app.add_typer(config_app, name="config")


# -- config ----------------------------------------------------------------------------------------


@config_app.command("list")
def config_list(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """List every setting with its value, default and meaning."""
    with _session(ctx) as opened:
        items = api.config_list(opened.store)
        db_path = str(opened.path)
    items["db"] = {"value": db_path, "default": str(settings.default_db_path()), "help": settings.DB_KEY.help}
    if json_:
        _emit_json(items)
        return
    from rich.table import Table

    table = Table("key", "value", "default", "meaning")
    for key, item in items.items():
        table.add_row(key, str(item["value"]), str(item["default"]), item["help"])
    out().print(table)


def _emit_setting(key: str, value, json_: bool, text: str) -> None:
    """`text` on stdout, or {"key": KEY, "value": VALUE} with --json."""
    if json_:
        _emit_json({"key": key, "value": str(value) if key == "db" else value})
    else:
        typer.echo(text)


@config_app.command("get")
def config_get(
    ctx: typer.Context, key: Annotated[str, typer.Argument(help="Setting name.")], json_: JsonOpt = False
) -> None:
    """Print one setting's value."""
    if key == "db":
        with _errors():
            path, _ = settings.resolve_db_path(ctx.obj.db)
        _emit_setting(key, path, json_, str(path))
        return
    with _session(ctx) as opened:
        value = api.config_get(opened.store, key)
    _emit_setting(key, value, json_, str(value))


@config_app.command("set", context_settings={"ignore_unknown_options": True})  # `config set k -1`: a value
def config_set(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Setting name (see `config list`).")],
    value: Annotated[str, typer.Argument(help="New value.")],
    json_: JsonOpt = False,
) -> None:
    """Change a setting. `config set db PATH` chooses the database file for later runs."""
    if key == "db":
        with _errors():
            path = api.set_db_path(value)
        _emit_setting(key, path, json_, f"db = {path}")
        return
    with _session(ctx) as opened:
        parsed = api.config_set(opened.store, key, value)
    _emit_setting(key, parsed, json_, f"{key} = {parsed}")


@config_app.command("reset")
def config_reset(
    ctx: typer.Context, key: Annotated[str, typer.Argument(help="Setting name.")], json_: JsonOpt = False
) -> None:
    """Return a setting to its default (`config reset db` forgets the saved database path)."""
    if key == "db":
        with _errors():
            path = api.reset_db_path()
        _emit_setting(key, path, json_, f"db = {path} (default)")
        return
    with _session(ctx) as opened:
        value = api.config_reset(opened.store, key)
    _emit_setting(key, value, json_, f"{key} = {value}")


