#!/usr/bin/env bash
# Static analysis of src/ with cppcheck, the layer rules (check_layers.py),
# and ruff's lint and format check of the Python (settings in pyproject.toml's
# [tool.ruff]); fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${BEAM_PYTHON:-/usr/bin/python3}
py_inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
cppcheck --enable=warning,performance,portability --inline-suppr --quiet --std=c11 \
  -I include -I src -I src/actor -I /usr/include -I "$py_inc" \
  --suppress=missingIncludeSystem --suppress='*:/usr/include/*' --suppress=toomanyconfigs \
  --error-exitcode=1 src/
echo "cppcheck: src/ clean"
"$py" scripts/check_layers.py

# ruff, pinned (its formatter's output changes between releases), installed
# into the Python that builds and tests when that one lacks it; Debian's
# system Python needs --break-system-packages for a pip install
ruff_version=0.8.6
if [ "$("$py" -m ruff --version 2>/dev/null)" != "ruff $ruff_version" ]; then
  "$py" -m pip install --quiet "ruff==$ruff_version" 2>/dev/null ||
    "$py" -m pip install --quiet --break-system-packages "ruff==$ruff_version"
fi
"$py" -m ruff check --quiet .
"$py" -m ruff format --check --quiet .
echo "ruff: python clean"
