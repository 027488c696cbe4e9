#!/usr/bin/env bash
# scripts/fuzz.sh [seconds-per-target] [target...] — builds the libFuzzer harnesses of
# tests/fuzz (clang, ASan + UBSan) in build-fuzz/ and fuzzes each reader for N seconds
# (default 120), one target at a time. Targets: idx image safetensors (default: all).
#
# Each target starts from the committed seeds (tests/fuzz/corpus/<target>/) and regressions
# (tests/fuzz/regressions/<target>/); the corpus it grows stays in build-fuzz/corpus/<target>/.
# A finding — a crash, a sanitizer report, an input taking over FUZZ_TIMEOUT seconds or 2 GiB —
# is written to build-fuzz/artifacts/<target>/ and the script exits non-zero: fix the reader,
# then copy the file to tests/fuzz/regressions/<target>/ (test_data replays it). Each target
# ends with a line saying how many inputs it ran (the log is build-fuzz/logs/<target>.log).
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (build parallelism, default 2),
# FUZZ_TIMEOUT (seconds one input may take, replays included, default 10),
# FUZZ_ARGS (extra libFuzzer flags, e.g. "-max_len=65536", or "-runs=10000000" to stop after
# that many inputs if it gets there before the time limit).
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

# A slow or memory-hungry input is a finding like a crash (libFuzzer exits non-zero and keeps it
# as timeout-* / oom-*), also under -fork=N in FUZZ_ARGS, which would otherwise ignore both.
limits=(-timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -ignore_timeouts=0 -ignore_ooms=0)
mkdir -p "$build/logs"

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
    "$exe" "${limits[@]}" "$regressions"/* >/dev/null 2>&1 || { echo "fuzz_$t: a regression input fails again"; "$exe" "${limits[@]}" "$regressions"/* 2>&1 | tail -30; status=1; continue; }
  fi
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  echo "== fuzz_$t: ${secs}s (findings go to $artifacts)"
  log="$build/logs/$t.log"
  if ! "$exe" -max_total_time="$secs" "${limits[@]}" -print_final_stats=1 \
      -artifact_prefix="$artifacts" "${dict[@]}" ${FUZZ_ARGS:-} "$work" "$seeds" "$regressions" 2>&1 | tee "$log"; then
    echo "fuzz_$t: FOUND A PROBLEM; inputs in $artifacts (fix the reader, then keep them in $regressions)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: //p' "$log" | tail -1)
  echo "== fuzz_$t: ${runs:-?} inputs run ($(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -1 || true))"
done
exit $status
