# bash completion for holdfastd (installed as share/bash-completion/completions/holdfastd; or
# `source` this file). Its flags are read from `holdfastd --help` of the holdfastd being
# completed; after the flags comes the job's command (torchrun's form), completed as files.

_holdfastd_help_flags() {
  "$@" --help 2>/dev/null | sed -nE 's/^  (-[^ ]+).*/\1/p' | tr ',' '\n'
}

_holdfastd() {
  local prog="${COMP_WORDS[0]}" cur="${COMP_WORDS[COMP_CWORD]}" prev=""
  ((COMP_CWORD > 0)) && prev="${COMP_WORDS[COMP_CWORD - 1]}"
  case "$prev" in
    --run-dir | --checkpoint-dir) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    -c | --config) COMPREPLY=($(compgen -f -X '!*.toml' -- "$cur") $(compgen -d -- "$cur")); return 0 ;;
    --metrics-textfile) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --scheduler) COMPREPLY=($(compgen -W "auto local slurm" -- "$cur")); return 0 ;;
    --requeue-path) COMPREPLY=($(compgen -W "auto epilog resubmit" -- "$cur")); return 0 ;;
    --nproc-per-node | --nproc_per_node) COMPREPLY=($(compgen -W "gpu" -- "$cur")); return 0 ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_holdfastd_help_flags "$prog")" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
  return 0
}
complete -F _holdfastd holdfastd
