#!/usr/bin/env bash
# The differential run: the end-to-end tests marked ray_compat (they use only
# Ray's public API) against real Ray 2.43.0, in its own virtual environment,
# with beam's python/ and build off the path. A test that fails here asserts
# something Ray does not do. Usage: scripts/test_real_ray.sh [pytest args]
# RAY_VENV overrides the environment's folder (default /opt/ray-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RAY_VENV:-/opt/ray-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import ray, pytest, numpy; assert ray.__version__ == "2.43.0"' 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet 'ray==2.43.0' pytest numpy
fi
unset PYTHONPATH BEAM_SOCKET BEAM_BEAMD BEAM_BEAMCTL RAY_ADDRESS
export BEAM_REAL_RAY=1
# Ray's workers import the test modules' classes by name, as the tests do
export PYTHONPATH=$PWD/tests/python
# Ray's usage stats and dashboard are off: nothing leaves the machine
export RAY_USAGE_STATS_ENABLED=0
tests=(tests/python/test_core_*.py tests/python/test_pg.py tests/python/test_parity_*.py
       tests/python/test_actor_options.py tests/python/test_cgraph_api.py
       tests/python/test_tasks_ray.py tests/python/test_worker_output.py
       tests/python/test_worker_env.py tests/python/test_cluster_utils.py tests/python/test_restarts.py)
# a first argument naming a test file or test runs only what the arguments name
if [ $# -gt 0 ] && [ -e "${1%%::*}" ]; then tests=(); fi
# Real Ray's compiled-graph channels leave their named semaphores in /dev/shm
# (sem.hdr<pid>-*, sem.obj<pid>-*, 360 a run): the run removes the ones it made
shm_before=$(mktemp)
ls /dev/shm >"$shm_before" 2>/dev/null || true
rc=0
# -u: Ray's exit must not eat pytest's last lines
"$venv/bin/python" -u -m pytest -q -p no:cacheprovider -m ray_compat "${tests[@]}" "$@" || rc=$?
{ ls /dev/shm 2>/dev/null | grep -E '^sem\.(hdr|obj)[0-9]+-' | grep -vxF -f "$shm_before" |
  sed 's#^#/dev/shm/#' | xargs -r rm -f; } || true
rm -f "$shm_before"
exit "$rc"
