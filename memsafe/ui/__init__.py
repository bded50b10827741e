"""Responsibility: `memsafe ui`, the local web page for seeing and curating the store.

Nothing is imported here: Starlette, uvicorn and Jinja2 load only when the page is started
(`memsafe.ui.server`), so every other command stays light at import.
"""
