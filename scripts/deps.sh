#!/usr/bin/env bash
# Installs what beam builds and tests with, from Debian's packages (the one
# list of them). Runs apt-get only when something is missing. The -dev
# packages also ship the static archives (libuv_a.a, libmsgpackc.a,
# libsodium.a) the wheel links (BEAM_STATIC_DEPS). `pip install .` fetches
# scikit-build-core and cloudpickle from PyPI.
set -euo pipefail
packages=(
  cmake gcc make pkg-config
  libuv1-dev libmsgpack-dev libcmocka-dev uthash-dev libsystemd-dev libsodium-dev
  python3-dev python3-cloudpickle python3-pytest
  python3-venv python3-pip  # tests/python/test_pip_install.py, test_recipe_netns.py: pip install . into a venv
  valgrind iproute2 cppcheck clang libclang-rt-14-dev  # clang: the libFuzzer targets (scripts/fuzz.sh) and their runtime
  python3-torch  # tests/python/test_cluster_torch.py (gloo across nodes); the test skips without it
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "beam: installing ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
