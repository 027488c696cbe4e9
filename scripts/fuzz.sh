#!/usr/bin/env bash
# scripts/fuzz.sh [seconds-per-target] [target...] — builds the libFuzzer harnesses of
# tests/fuzz (clang, ASan + UBSan) in build-fuzz/ and fuzzes each reader for N seconds
# (default 120), one target at a time. Targets: idx image safetensors (default: all).
#
# Each target starts from the committed seeds (tests/fuzz/corpus/<target>/) and regressions
# (tests/fuzz/regressions/<target>/); the corpus it grows stays in build-fuzz/corpus/<target>/.
# A finding is written to build-fuzz/artifacts/<target>/ and the script exits non-zero: fix
# the reader, then copy the file to tests/fuzz/regressions/<target>/ (test_data replays it).
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (build parallelism, default 2),
# FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=65536").
set -euo pipefail

secs=${1:-120}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx image safetensors)

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
cd "$root"

command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang++ (apt-get install clang)" >&2; exit 1; }
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMIXTAPE_SANITIZE=ON -DMIXTAPE_FUZZ=ON -DMIXTAPE_BUILD_BENCH=OFF -DMIXTAPE_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  regressions="tests/fuzz/regressions/$t"
  work="$build/corpus/$t"
  artifacts="$build/artifacts/$t/"
  mkdir -p "$work" "$artifacts" "$regressions"
  # Replay the known crashers first: each must now end in a clean error.
  if compgen -G "$regressions/*" >/dev/null; then
    echo "== fuzz_$t: replaying $(ls "$regressions" | wc -l) regression inputs"
    "$exe" -runs=1 "$regressions"/* >/dev/null 2>&1 || { echo "fuzz_$t: a regression input fails again"; "$exe" "$regressions"/* 2>&1 | tail -30; status=1; continue; }
  fi
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "== fuzz_$t: ${secs}s (findings go to $artifacts)"
  if ! "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "${dict[@]}" ${FUZZ_ARGS:-} "$work" "$seeds" "$regressions"; then
    echo "fuzz_$t: FOUND A PROBLEM; inputs in $artifacts (fix the reader, then keep them in $regressions)"
    status=1
  fi
done
exit $status
