#!/bin/sh
# GRPO figures, synchronous against asynchronous; see rl_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/rl_bench.py" "$@"
