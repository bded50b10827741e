"""Responsibility: recall, the pipeline that finds the memories most relevant to a query and packs
them into a token budget (DESIGN.md, "Recall pipeline"). The handlers `api.recall` and
`api.recall_as_of` compose its steps; nothing here parses user input or formats output.
"""
