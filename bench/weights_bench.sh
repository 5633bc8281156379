#!/bin/sh
# Policy weights, files vs network; see weights_bench.py.
exec /usr/bin/python3 "$(dirname "$0")/weights_bench.py" "$@"
