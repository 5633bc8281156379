# bash completion for runctl (installed as share/bash-completion/completions/runctl; or
# `source` this file). The commands and flags are read from `runctl [COMMAND] --help` of the
# runctl being completed, so they are never out of date; RUN completes to 'latest'.

# The flags (every spelling) and the subcommands a Holdfast program's --help lists.
_holdfast_help_flags() {
  "$@" --help 2>/dev/null | sed -nE 's/^  (-[^ ]+).*/\1/p' | tr ',' '\n'
}
_holdfast_help_commands() {
  "$@" --help 2>/dev/null | sed -n '/^Subcommands:/,/^$/p' | sed -nE 's/^  ([a-z][a-z0-9-]*).*/\1/p'
}

_runctl() {
  local prog="${COMP_WORDS[0]}" cur="${COMP_WORDS[COMP_CWORD]}" prev=""
  ((COMP_CWORD > 0)) && prev="${COMP_WORDS[COMP_CWORD - 1]}"
  local commands cmd="" i
  commands="$(_holdfast_help_commands "$prog")"
  for ((i = 1; i < COMP_CWORD; i++)); do
    [[ "${COMP_WORDS[i]}" == "--" ]] && return 0  # runctl health -- ARGS: holdfast-health's
    if [[ $'\n'"$commands"$'\n' == *$'\n'"${COMP_WORDS[i]}"$'\n'* ]]; then
      cmd="${COMP_WORDS[i]}"
      break
    fi
  done
  case "$prev" in
    --run-dir | --all | --history-dir) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    --format) COMPREPLY=($(compgen -W "md json" -- "$cur")); return 0 ;;
    --via) COMPREPLY=($(compgen -W "auto unix tcp" -- "$cur")); return 0 ;;
    --out | --metrics) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --timeout-ms | --timeout | --limit | --events | --from-step | --metric | --history-runs | --history-window-days)
      COMPREPLY=(); return 0 ;;
  esac
  if [[ "$cur" == -* ]]; then
    local flags
    # The command's own flags and runctl's, which may follow the command (`runctl runs --json`).
    flags="$(_holdfast_help_flags "$prog" $cmd; [[ -n "$cmd" ]] && _holdfast_help_flags "$prog")"
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [[ -z "$cmd" ]]; then
    COMPREPLY=($(compgen -W "$commands" -- "$cur"))
  elif [[ "$cmd" == node ]]; then
    COMPREPLY=($(compgen -A hostname -- "$cur"))  # HOST
  else
    COMPREPLY=($(compgen -W "latest" -- "$cur"))
  fi
  return 0
}
complete -F _runctl runctl
