#!/bin/sh
# One command for the PyTorch supervision overhead benchmark; see pytorch_overhead_bench.py.
exec /usr/bin/python3 "$(dirname "$0")/pytorch_overhead_bench.py" "$@"
