#!/bin/sh
# One command for the soak over the fault matrix; see soak.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/soak.py" "$@"
