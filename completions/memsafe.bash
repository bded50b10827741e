# memsafe shell completion for bash (from `make docs`; `memsafe init` installs it)
_memsafe_completion() {
    local IFS=$'
'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \
                   COMP_CWORD=$COMP_CWORD \
                   _MEMSAFE_COMPLETE=complete_bash $1 ) )
    return 0
}

complete -o default -F _memsafe_completion memsafe
