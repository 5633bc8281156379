#!/bin/sh
# One command for the trainer benchmark; see trainer_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/trainer_bench.py" "$@"
