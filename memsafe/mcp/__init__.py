"""Responsibility: the MCP edge, `memsafe serve`: the tools over the handlers of `memsafe.api`
(`tools`), the stdio transport with its start-up handshake (`stdio`), and streamable HTTP with
tokens for a team (`http`). Beside `memsafe.cli` and `memsafe.ui`, never importing either.

Entry points (what another edge may import, lazily, to start this one): `stdio.serve` and
`stdio.STOP`, `http.serve_http`.
"""
