#!/usr/bin/env bash
# Writes a small real-English corpus to $1: the license texts every Debian
# machine carries in /usr/share/common-licenses (package base-files).
set -euo pipefail
out=${1:?usage: make_corpus.sh OUT}
cat /usr/share/common-licenses/{GPL-3,LGPL-2.1,Apache-2.0,Artistic,MPL-2.0,GFDL-1.3} > "$out" 2>/dev/null ||
  cat /usr/share/common-licenses/* > "$out"
echo "corpus: $out ($(wc -c < "$out") bytes)"
