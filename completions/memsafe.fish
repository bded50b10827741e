# memsafe shell completion for fish (from `make docs`; `memsafe init` installs it)
complete --command memsafe --no-files --arguments "(env _MEMSAFE_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=get-args _TYPER_COMPLETE_ARGS=(commandline -cp) memsafe)" --condition "env _MEMSAFE_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=is-args _TYPER_COMPLETE_ARGS=(commandline -cp) memsafe"
