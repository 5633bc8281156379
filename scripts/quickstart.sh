#!/usr/bin/env bash
# The main job: set up, build, and train a small GPT with two data-parallel ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p runs/quickstart
scripts/make_corpus.sh runs/quickstart/corpus.txt
build/trainer/holdfast-train --config examples/quickstart.toml --nproc 2 \
  --set data.path=runs/quickstart/corpus.txt "$@"
