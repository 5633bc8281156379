#!/bin/bash
# A Prolog that runs the site's own node check (here LBNL NHC) and then Holdfast's, in that
# order: slurm.conf's Prolog= names one program, or a glob whose programs Slurm 22.05 runs all
# at once (docs/slurm.md, "Health gate: the Prolog"). Copy it, set the two paths, and name it:
#   Prolog=/etc/slurm/prolog-chain.sh   PrologFlags=Alloc   PrologEpilogTimeout=120
# PrologEpilogTimeout covers both: NHC's own timeout (its TIMEOUT setting, 30 s unless set)
# plus this Prolog's HOLDFAST_PROLOG_TIMEOUT + 25 s.
#
# A node NHC fails is marked offline by NHC itself, with NHC's reason, and Holdfast's check is
# not run; a node NHC passes is checked by holdfast-prolog.sh, which drains it with its own
# reason, or passes, or logs a broken checker (its settings: /etc/holdfast/prolog.conf).
NHC=${NHC:-/usr/sbin/nhc}
HOLDFAST_PROLOG=${HOLDFAST_PROLOG:-/usr/libexec/holdfast/holdfast-prolog.sh}
"$NHC" || exit $?
exec "$HOLDFAST_PROLOG"
