#!/usr/bin/env python3
"""The structure rules of issue 22, checked on every test run (scripts/test.sh):
each fact has one representation and one place that decides it, and no file or
function grows past what a reader can hold.

  - the progress record's ring layout is read only in common/ and the wire codec;
  - no /proc state letter comparisons in daemon/ or cli/ (common/proc_state.h decides);
  - RunbookFor is called in at most two places (the recorder, runctl);
  - no nlohmann/json in the run controller or the recorder (typed evidence);
  - cluster_protocol.h does not include triage.h;
  - no clock read in daemon/ outside the time source and the asio timers;
  - daemon/supervisor.cc <= 400 lines; no daemon/ or cli/ source file > 600 lines;
  - no function > 120 lines in daemon/, cli/ and trainer/main.cc.

Prints every violation with its file and line; exit 1 when there is one.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
problems = []


def sources(*dirs, tests=True):
    for d in dirs:
        for p in sorted((ROOT / d).glob("*")):
            if p.suffix in (".cc", ".h") and (tests or not re.search(r"_test(_util)?\.(cc|h)$", p.name)):
                yield p


def grep(pattern, files, allowed=()):
    hits = []
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        for n, line in enumerate(p.read_text(errors="replace").split("\n"), 1):
            code = line.split("//", 1)[0]
            if re.search(pattern, code):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def rule(name, hits, at_most=0):
    if len(hits) > at_most:
        problems.append(f"{name} ({len(hits)} found, at most {at_most}):\n  " + "\n  ".join(hits))


product = list(sources("daemon", "cli", tests=False))
rule("the progress record's ring layout is read outside common/ and the wire codec",
     grep(r"% kProgressRingSize|ProgressRecordLayout|CollectiveEntry", product, allowed=("daemon/cluster_rank_view.cc",)))
rule("a /proc state letter is compared in daemon/ or cli/ (ask common/proc_state.h)",
     grep(r"(==|!=)\s*'[TtZRSD]'|'[TtZRSD]'\s*(==|!=)", product))
rule("RunbookFor is called in more than two places (RunRecorder::Record and runctl)",
     grep(r"\bRunbookFor\(", product), at_most=2)
rule("nlohmann/json in the run controller or the recorder (use lineage/incident.h's typed evidence)",
     grep(r"nlohmann", [ROOT / "daemon/run_controller.cc", ROOT / "daemon/run_controller_execute.cc",
                        ROOT / "daemon/run_recorder.cc"]))
rule("cluster_protocol.h includes triage.h", grep(r'#include "daemon/triage.h"', [ROOT / "daemon/cluster_protocol.h"]))
rule("a clock is read in daemon/ outside the time source",
     grep(r"steady_clock::now|system_clock::now|\bMonotonicNowNs\(\)|std::time\(|steady_timer",
          product, allowed=("daemon/asio_timer.cc", "daemon/asio_timer.h")))


def function_lengths(path):
    """Top-level function bodies: a signature line at column 0 to the '}' at column 0."""
    lines = path.read_text(errors="replace").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if (re.match(r"^[A-Za-z_].*\(", line) and not re.match(r"^(namespace|struct|class|using|#|enum)", line)
                and not line.rstrip().endswith(";") and not ("{" in line and line.rstrip().endswith("}"))):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith("}"):
                k = j
                while k < len(lines) and lines[k] != "}":
                    k += 1
                yield i + 1, k - i + 1, line.strip()
                i = k
        i += 1


limits = {"daemon/supervisor.cc": 400}
for p in sources("daemon", "cli"):
    rel = p.relative_to(ROOT).as_posix()
    n = p.read_text(errors="replace").count("\n")
    limit = limits.get(rel, 600)
    if n > limit:
        problems.append(f"{rel} has {n} lines; the limit is {limit}: split it by what its parts do")
for p in list(sources("daemon", "cli")) + [ROOT / "trainer/main.cc"]:
    if p.suffix != ".cc":
        continue
    for at, n, sig in function_lengths(p):
        if n > 120:
            problems.append(f"{p.relative_to(ROOT).as_posix()}:{at}: a function of {n} lines (limit 120): {sig[:80]}")

if problems:
    print("scripts/check_structure.py: FAILED\n" + "\n".join(problems), file=sys.stderr)
    sys.exit(1)
print("scripts/check_structure.py: the structure rules hold")
