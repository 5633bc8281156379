"""A stand-in Python rank for the stacks suite: steps with the holdfast module
(50 ms each); in generation 0, rank 1 hangs at step HANG_STEP (-1: never) in
hang_in_python_sleep (a sleep, as a rank blocked in a C call would), which its
Python stack must name. With TEARDOWN "stuck", rank 1 does not exit after the
last step: it blocks SIGTERM and sleeps in stuck_in_teardown (as a rank stuck
in destroy_process_group would), while rank 0 exits 0.

    hung_python_rank.py STEPS HANG_STEP [TEARDOWN]
"""

import os
import signal
import sys
import time

import holdfast

STEPS = int(sys.argv[1])
HANG_STEP = int(sys.argv[2])
TEARDOWN = sys.argv[3] if len(sys.argv) > 3 else "clean"


def hang_in_python_sleep():
    while True:
        time.sleep(1000)


def stuck_in_teardown():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    while True:
        time.sleep(1000)


def main():
    rank = int(os.environ["HOLDFAST_RANK"])
    first_generation = os.environ.get("HOLDFAST_GENERATION", "0") == "0"
    for step in range(STEPS):
        with holdfast.phase("forward"):
            if first_generation and rank == 1 and step == HANG_STEP:
                hang_in_python_sleep()
            time.sleep(0.05)
        holdfast.step(step + 1)
    if TEARDOWN == "stuck" and rank == 1:
        stuck_in_teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
