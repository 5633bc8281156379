#!/bin/sh
# The pipeline bubble and memory per rank of each layout; see parallel_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/parallel_bench.py" "$@"
