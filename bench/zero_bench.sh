#!/bin/sh
# ZeRO-1 against plain data parallelism; see zero_bench.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/zero_bench.py" "$@"
