#!/usr/bin/env bash
# The GPU check of issue 6, for a machine with an NVIDIA GPU: one script, everything into one log, a summary
# at the end. It reports only what it ran; the parts of issue 6 that are not built yet print
# "NOT IMPLEMENTED: ..." instead of a result.
#
#   tools/gpu_check.sh                    # build-gpu/, log in build-gpu/gpu_check.log (and $OUT/ when set)
#   GPU_CHECK_FULL=1 tools/gpu_check.sh   # also the whole CTest suite (-LE slow) of the CUDA build
#   GPU_CHECK_ASAN=1 tools/gpu_check.sh   # also the CUDA tests under AddressSanitizer
#
# Steps: environment (nvidia-smi, nvcc, driver) -> configure with -DTK_CUDA=ON -> build trainkit + tests ->
# `trainkit devices` -> `trainkit smi` -> the CUDA tests (they must not skip on a GPU) -> two processes with
# TK_MEMORY_FRACTION=0.45 side by side holding 90% of their budget, with `trainkit smi` (NVML per-process
# memory) while both hold -> [full suite] -> [ASan] -> the list of what is not implemented.
#
# AddressSanitizer and the CUDA driver: the driver maps memory where ASan keeps its shadow gap, so CUDA calls
# can fail or crash under ASan unless ASAN_OPTIONS has protect_shadow_gap=0 (set below for the ASan step).
# LeakSanitizer reports the CUDA runtime's own allocations at exit, so that step also sets detect_leaks=0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BUILD="${GPU_CHECK_BUILD:-build-gpu}"
mkdir -p "$BUILD"
LOG="${GPU_CHECK_LOG:-$BUILD/gpu_check.log}"
JOBS="$(nproc)"
HOLD_SECONDS="${GPU_CHECK_HOLD_SECONDS:-10}"
: >"$LOG"
SUMMARY=()
FAILED=0

say() { echo "$*" | tee -a "$LOG"; }
# step NAME COMMAND...: runs it with its output in the log (and on the terminal), records PASS/FAIL.
step() {
  local name="$1"
  shift
  say ""
  say "== $name"
  say "\$ $*"
  "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    SUMMARY+=("PASS             $name")
  else
    SUMMARY+=("FAIL (exit $rc)  $name")
    FAILED=1
  fi
  return "$rc"
}
not_implemented() {
  say "NOT IMPLEMENTED: $*"
  SUMMARY+=("NOT IMPLEMENTED  $*")
}

say "trainkit GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(uname -srm), $(nproc) CPUs"
say ""
say "== environment"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi 2>&1 | tee -a "$LOG"
  GPU_NAME="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
else
  say "nvidia-smi not found"
  GPU_NAME="(nvidia-smi not found)"
fi
NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
"$NVCC" --version 2>&1 | tail -2 | tee -a "$LOG"
say "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} TK_VISIBLE_DEVICES=${TK_VISIBLE_DEVICES-<unset>}"

if ! step "configure (-DTK_CUDA=ON)" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTK_CUDA=ON -DTK_WERROR=ON \
  -DTK_BUILD_BENCH=OFF; then
  say "configure failed: nothing else can run"
else
  TARGETS=(--target trainkit_cli trainkit_tests)
  [ "${GPU_CHECK_FULL:-0}" = 1 ] && TARGETS=()
  if step "build" cmake --build "$BUILD" -j"$JOBS" "${TARGETS[@]}"; then
    CLI="$BUILD/trainkit"
    TESTS="$BUILD/tests/trainkit_tests"
    step "trainkit devices" "$CLI" devices
    step "trainkit smi" "$CLI" smi

    # The CUDA tests. On a GPU machine none of the GPU tests may skip: a skip means discovery failed.
    say ""
    say "== CUDA tests (Cuda*, CliDevices*, CliSmi*)"
    "$TESTS" --gtest_filter='Cuda*:Nccl*:CliDevices*:CliSmi*' 2>&1 | tee "$BUILD/cuda_tests.txt" | tee -a "$LOG" >/dev/null
    rc=${PIPESTATUS[0]}
    tail -25 "$BUILD/cuda_tests.txt"
    skipped_gpu="$(grep -oE '^\[  SKIPPED \] (CudaGpu\.|CliDevices\.WithAGpu|CliSmi\.WithAGpu)[A-Za-z]*' \
      "$BUILD/cuda_tests.txt" | sort -u | wc -l)"
    if [ "$rc" -ne 0 ]; then
      SUMMARY+=("FAIL (exit $rc)  CUDA tests")
      FAILED=1
    elif [ "$skipped_gpu" -gt 0 ]; then
      SUMMARY+=("FAIL             CUDA tests: $skipped_gpu GPU tests skipped (no CUDA device found; see the log)")
      FAILED=1
    else
      SUMMARY+=("PASS             CUDA tests (GPU tests ran, none skipped)")
    fi

    # Two processes side by side, each with 45% of the GPU: each fills 90% of its budget and holds it.
    say ""
    say "== two processes with TK_MEMORY_FRACTION=0.45 side by side (hold ${HOLD_SECONDS} s each)"
    pids=()
    for i in 1 2; do
      TK_MEMORY_FRACTION=0.45 TK_GPU_CHECK_HOLD_SECONDS="$HOLD_SECONDS" \
        "$TESTS" --gtest_filter=CudaGpuCheck.HoldMemoryUnderTheFractionBudget >"$BUILD/hold_$i.txt" 2>&1 &
      pids+=("$!")
    done
    sleep $((HOLD_SECONDS / 2 + 2))
    say "-- trainkit smi while both hold (NVML per-process memory):"
    "$CLI" smi 2>&1 | tee -a "$LOG"
    wait "${pids[0]}"
    rc1=$?
    wait "${pids[1]}"
    rc2=$?
    for i in 1 2; do
      say "-- process $i:"
      tee -a "$LOG" <"$BUILD/hold_$i.txt" | grep -E "HOLD|Created device|OK|FAILED|SKIPPED|Skipped|no CUDA device|Failure|Expected|Which is"
    done
    say "-- after both exited:"
    "$CLI" smi 2>&1 | tee -a "$LOG"
    if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && ! grep -q "SKIPPED \]" "$BUILD/hold_1.txt" "$BUILD/hold_2.txt"; then
      SUMMARY+=("PASS             two processes at TK_MEMORY_FRACTION=0.45 held 90% of their budgets side by side")
    else
      SUMMARY+=("FAIL             two processes at TK_MEMORY_FRACTION=0.45 (exit $rc1 / $rc2, or skipped; see the log)")
      FAILED=1
    fi

    if [ "${GPU_CHECK_FULL:-0}" = 1 ]; then
      # Note: tests written before the CUDA backend assume list_devices() has only cpu devices
      # (test_memory.cpp, devices/test_logical_devices.cpp); on a GPU machine they fail until updated.
      step "whole suite (ctest -LE slow)" ctest --test-dir "$BUILD" -LE slow -j"$JOBS" --output-on-failure
    fi
  fi
fi

if [ "${GPU_CHECK_ASAN:-0}" = 1 ]; then
  if step "configure ASan (-DTK_CUDA=ON -DTK_SANITIZE=ON)" cmake -S . -B "$BUILD-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTK_CUDA=ON -DTK_SANITIZE=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF &&
    step "build ASan" cmake --build "$BUILD-asan" -j"$JOBS" --target trainkit_cli trainkit_tests; then
    ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      step "CUDA tests under ASan (protect_shadow_gap=0)" "$BUILD-asan/tests/trainkit_tests" \
      --gtest_filter='Cuda*:Nccl*:CliDevices*:CliSmi*'
  fi
fi

say ""
say "== not built yet (issues 6, 13)"
not_implemented "CUDA kernels beyond the first 33 ops (activations, softmax, optimizer updates, MatMul on cuBLASLt, AllReduce on NCCL, elementwise, bias, dropout, the sparse loss and accuracy: compiled, with no Backend object to run them in a program yet): casts, StepControl, the other losses, cuDNN ops"
not_implemented "cuDNN convolution, pooling, BatchNormalization"
not_implemented "cross-backend test harness (every op's forward and gradient vs the cpu backend)"
not_implemented "compute and copy streams, pinned host buffers, next-batch prefetch to the GPU"
not_implemented "training step captured as a CUDA Graph and replayed"
not_implemented "trainkit fit on a GPU (so: two 'trainkit fit' runs at TK_MEMORY_FRACTION=0.45, and memory back to baseline after clear_session / model destruction of a GPU model)"
not_implemented "MLP and CNN training throughput vs PyTorch on this GPU"

say ""
say "================ summary ($(date -u '+%Y-%m-%d %H:%M UTC'), GPU: $GPU_NAME)"
for line in "${SUMMARY[@]}"; do say "$line"; done
say "log: $LOG"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$LOG" "$OUT/" && echo "copied to $OUT/$(basename "$LOG")"; fi
exit "$FAILED"
