#!/bin/sh
# One command for the supervision benchmark; see supervision_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/supervision_bench.py" "$@"
