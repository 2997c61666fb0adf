#!/usr/bin/env bash
# The sync call, the member-local call and the compiled-graph step of two
# built trees (each with build/env.sh), alternated round by round: what a
# change to beam's core must not make slower. Prints each round's figures;
# read the medians. Usage: bench/before_after.sh BEFORE_DIR AFTER_DIR [ROUNDS]
# e.g. git worktree add /tmp/before <rev> && cmake -S /tmp/before -B /tmp/before/build
#      && cmake --build /tmp/before/build && bench/before_after.sh /tmp/before . 5
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
for r in $(seq "$rounds"); do
  for tree in "$before" "$after"; do
    (
      cd "$tree"
      # shellcheck disable=SC1091
      source build/env.sh
      echo "== round $r $tree core"
      "$BEAM_PYTHON" bench/bench_core.py --quick | grep -E "sync actor call|in flight"
      echo "== round $r $tree cluster"
      "$BEAM_PYTHON" bench/bench_cluster.py --quick | grep -E "head->head|member->member"
      echo "== round $r $tree cgraph"
      "$BEAM_PYTHON" bench/bench_cgraph.py --quick | grep -E "step "
    )
  done
done
