#!/usr/bin/env bash
# Install time and venv size of the README's two install commands, for one or more revisions:
#
#   bash scripts/measure_install.sh [REV ...]        # default: HEAD
#
# Each revision is exported (git archive) into a scratch directory and installed into a fresh
# venv, as the Quick start does: `pip install -e .` (the main job) and `pip install -e ".[test]"`.
# Times include creating the venv; pip's download cache is whatever this machine has (warm here).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for rev in "${@:-HEAD}"; do
  tree="$scratch/$rev"
  mkdir -p "$tree"
  git -C "$repo" archive "$rev" | tar -x -C "$tree"
  for extra in "" "[test]"; do
    rm -rf "$tree/.venv"
    start=$(date +%s.%N)
    (cd "$tree" && python3 -m venv .venv && .venv/bin/pip install -q -e ".$extra" >/dev/null)
    end=$(date +%s.%N)
    printf '%s  pip install -e .%-7s %6.0f s  %6s MiB\n' "$rev" "$extra" \
      "$(echo "$end - $start" | bc)" "$(du -sm "$tree/.venv" | cut -f1)"
  done
done
