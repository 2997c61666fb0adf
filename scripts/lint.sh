#!/usr/bin/env bash
# Static analysis of src/ with cppcheck; fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
py_inc=$("${BEAM_PYTHON:-/usr/bin/python3}" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
cppcheck --enable=warning,performance,portability --inline-suppr --quiet --std=c11 \
  -I include -I src -I /usr/include -I "$py_inc" \
  --suppress=missingIncludeSystem --suppress='*:/usr/include/*' --suppress=toomanyconfigs \
  --error-exitcode=1 src/
echo "cppcheck: src/ clean"
"${BEAM_PYTHON:-/usr/bin/python3}" scripts/check_layers.py
