#!/bin/sh
# One command for the scale harness; see scale_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/scale_bench.py" "$@"
