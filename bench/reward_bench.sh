#!/bin/sh
# The reward service: rule vs learned reward model, batched or not; see reward_bench.py.
exec /usr/bin/python3 "$(dirname "$0")/reward_bench.py" "$@"
