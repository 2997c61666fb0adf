#!/usr/bin/env bash
# Builds beam and runs every test: the C unit tests (ctest) and the Python
# end-to-end suite (pytest) against the build. Usage: scripts/test.sh [BUILD_DIR]
# BEAM_SANITIZE=1 builds with ASan/UBSan first.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ "${BEAM_SANITIZE:-0}" = 1 ] && cmake_args+=(-DBEAM_SANITIZE=ON)
[ "${CI:-}" = true ] && cmake_args+=(-DBEAM_WERROR=ON)
cmake -S . -B "$build" "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
# shellcheck disable=SC1091
source "$build/env.sh"
(cd "$build" && ctest --output-on-failure)
preload=()
if [ "${BEAM_SANITIZE:-0}" = 1 ]; then
  # the extension is built with ASan: the interpreter must load its runtime first
  preload=(env LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
fi
"${preload[@]}" "$BEAM_PYTHON" -m pytest -q tests/python "${@:2}"
