#!/usr/bin/env bash
# The main job: installs beam's packages, builds, starts a beamd with 4
# pretend GPUs, runs the vLLM-shaped demo on it (scripts/demo.py), shows
# `beamctl status` before and after, and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
# shellcheck disable=SC1091
source build/env.sh
dir=$(mktemp -d /tmp/beam-demo-XXXXXX)
export BEAM_SOCKET="$dir/beamd.sock"
"$BEAM_BEAMD" --socket "$BEAM_SOCKET" --num-gpus "${DEMO_GPUS:-4}" --log-level warn 2>"$dir/beamd.log" &
beamd_pid=$!
trap 'kill $beamd_pid 2>/dev/null; wait $beamd_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$BEAM_SOCKET" ] && break; sleep 0.05; done
echo "== beamctl status (before)"
"$BEAM_BEAMCTL" status
echo "== demo"
"$BEAM_PYTHON" scripts/demo.py
echo "== beamctl status (after)"
"$BEAM_BEAMCTL" status
