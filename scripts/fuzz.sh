#!/usr/bin/env bash
# Builds beam's libFuzzer targets (tests/fuzz/fuzz_*.c) with clang under
# ASan+UBSan and runs each for SECONDS, starting from its checked-in corpus
# (tests/fuzz/corpus/<target>/; new inputs go to a scratch copy, not the
# repo). Fails if any target finds a crash, a leak or a hang.
#   scripts/fuzz.sh SECONDS [TARGET...]     (targets: codec dispatch link; default all)
# BEAM_FUZZ_OUT (default build-fuzz) holds the binaries, the working corpora,
# each run's log and any crash artifacts. Extra libFuzzer flags can be passed
# in BEAM_FUZZ_FLAGS (e.g. "-jobs=4 -workers=4").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
  exit 2
fi
seconds=$1
shift
cc=${BEAM_FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (Debian: apt-get install -y clang)" >&2
  exit 2
fi
out=${BEAM_FUZZ_OUT:-build-fuzz}
mkdir -p "$out"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    t=${f#tests/fuzz/fuzz_}
    targets+=("${t%.c}")
  done
fi

cflags=(-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Iinclude -Isrc -Isrc/actor)

# Every daemon module but the programs' mains; notify.c is left out (only
# beamd's main calls it, and without libsystemd it needs headers the fuzz
# build does not give it).
core_sources() {
  for f in src/*.c src/actor/*.c; do
    case $f in src/beamd.c | src/beamctl.c | src/notify.c) ;; *) echo "$f" ;; esac
  done
}

build() {
  local t=$1 srcs libs extra=()
  case $t in
    codec)
      srcs="src/codec.c src/decoder.c src/buf.c"
      libs="msgpack"
      ;;
    *)
      srcs=$(core_sources)
      libs="libuv msgpack"
      pkg-config --exists libsodium && libs+=" libsodium"
      # workers are never started: see the top of fuzz_dispatch.c (and fuzz_link.c)
      extra=(-Wl,--wrap=uv_spawn -lm)
      ;;
  esac
  # shellcheck disable=SC2086
  "$cc" "${cflags[@]}" $srcs "tests/fuzz/fuzz_$t.c" $(pkg-config --cflags --libs $libs) "${extra[@]}" \
    -o "$out/fuzz_$t"
}

failed=()
for t in "${targets[@]}"; do
  if [ ! -f "tests/fuzz/fuzz_$t.c" ]; then
    echo "fuzz: no target tests/fuzz/fuzz_$t.c" >&2
    exit 2
  fi
  echo "fuzz: building fuzz_$t" >&2
  build "$t"
  work="$out/corpus-$t"
  mkdir -p "$work"
  [ -d "tests/fuzz/corpus/$t" ] && cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  flags=(-max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$out/$t-")
  [ -f "tests/fuzz/$t.dict" ] && flags+=(-dict="tests/fuzz/$t.dict")
  # shellcheck disable=SC2206
  flags+=(${BEAM_FUZZ_FLAGS:-})
  echo "fuzz: running fuzz_$t for ${seconds}s (log: $out/$t.log)" >&2
  if "$out/fuzz_$t" "${flags[@]}" "$work" >"$out/$t.log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
    echo "fuzz: fuzz_$t ok: ${execs:-?} inputs" >&2
  else
    echo "fuzz: fuzz_$t FAILED; the end of its log:" >&2
    tail -40 "$out/$t.log" >&2
    ls "$out/$t"-* 2>/dev/null >&2 || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
