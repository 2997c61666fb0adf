#!/usr/bin/env bash
# The vLLM end-to-end kit: makes (once) the variant's venv outside the repo
# (setup.sh), then runs the kit's tests with that venv's Python.
# Usage: tests/vllm_e2e/run.sh beam|ray [pytest args]
# Needs root (the run's processes are tracked in a pids cgroup; the
# two-node test makes network namespaces).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
variant=${1:?usage: run.sh beam|ray [pytest args]}
shift
venv=$(bash "$here/setup.sh" "$variant")
unset RAY_ADDRESS BEAM_SOCKET BEAM_BEAMD BEAM_BEAMCTL PYTHONPATH OMP_NUM_THREADS
cd "$here"
echo "vllm kit: $variant ($venv)"
exec "$venv/bin/python" -u -m pytest -q -p no:cacheprovider -rs "$@" test_vllm_e2e.py
