#!/bin/sh
# One command for the soak over the Slurm fault kinds (as root); see soak_slurm.py for the options.
exec /usr/bin/python3 "$(dirname "$0")/soak_slurm.py" "$@"
