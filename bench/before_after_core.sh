#!/usr/bin/env bash
# bench_core.py's sync call and 1000 calls in flight (with CPU per call per
# process) of two built trees, alternated round by round, unpinned and
# pinned to one CPU (taskset -c 0): read the medians. AFTER_ENV is set for
# the after tree only (e.g. AFTER_ENV=BEAM_DIRECT_CALLS=0: direct calls are
# on by default since issue 25, so a tree of before then needs =1 to use them).
# Usage: [AFTER_ENV=VAR=VALUE] bench/before_after_core.sh BEFORE_DIR AFTER_DIR [ROUNDS] [--quick]
set -euo pipefail
before=$1 after=$2 rounds=${3:-5} quick=${4:-}
for r in $(seq "$rounds"); do
  for pin in "" "taskset -c 0"; do
    for tree in "$before" "$after"; do
      (
        cd "$tree"
        # shellcheck disable=SC1091
        source build/env.sh
        extra=()
        [ "$tree" = "$after" ] && [ -n "${AFTER_ENV:-}" ] && extra=(env "$AFTER_ENV")
        echo "== round $r ${pin:-unpinned} $tree"
        # shellcheck disable=SC2086
        "${extra[@]}" $pin "$BEAM_PYTHON" bench/bench_core.py $quick | grep -E "sync actor call|in flight"
      )
    done
  done
done
