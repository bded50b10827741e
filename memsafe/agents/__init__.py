"""Responsibility: the agent-loop edge: memsafe inside an agent's lifecycle hooks (Claude Code, Codex
CLI, Gemini CLI, Cursor). `protocol` owns the hook protocol (read the event JSON an agent writes
on stdin, dispatch it, write the reply it reads on stdout); `sessions` keeps the small state of
each agent session between hooks. Started as `memsafe agent hook` (`memsafe.__main__` runs it
without the CLI)."""
