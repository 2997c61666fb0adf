#!/usr/bin/env bash
# valgrind memcheck over every C unit test of a build: no error, no leak.
# Usage: scripts/valgrind.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
status=0
for t in "$build"/test_*; do
  [ -x "$t" ] || continue
  if BEAM_UNDER_VALGRIND=1 valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
       "$t" >/dev/null 2>"$t.valgrind"; then
    echo "valgrind: $(basename "$t") clean"
  else
    echo "valgrind: $(basename "$t") FAILED"; cat "$t.valgrind"; status=1
  fi
done
exit $status
