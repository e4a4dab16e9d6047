#!/usr/bin/env bash
# kill -9 test for BackupAndRestore (CTest kill_resume): a `trainkit fit` with --backup-dir is killed at random
# moments 20 times, and once at each crash point inside the backup write (TK_TEST_CRASH_AT: before_fsync,
# before_rename, after_rename); the same command is started again each time. Checks:
#   - every restart resumes from the last backup (the step it reports never goes back, and a run after a kill
#     inside the write resumes from the previous backup or the new one, never from a damaged file);
#   - the final state (--keep-backup) equals an uninterrupted run's bit for bit;
#   - no temporary file is left behind, and the backup always loads (a truncated one would fail the restart).
# Usage: kill_resume.sh TRAINKIT_CLI [KILLS]
set -uo pipefail
cli="$1"
kills="${2:-20}"
fm_src="${TK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
[ -f "$fm_src/train-images-idx3-ubyte.gz" ] || [ -f "$fm_src/train-images-idx3-ubyte" ] || {
  echo "SKIP: no Fashion-MNIST in $fm_src"; exit 77; }
work="$(mktemp -d "${TMPDIR:-/tmp}/tk_kill_resume.XXXXXX")"
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/../tools/idx_head.sh"
idx_head "$fm_src" "$work" train-images-idx3-ubyte 2000 16 784
idx_head "$fm_src" "$work" train-labels-idx1-ubyte 2000 8 1
idx_head "$fm_src" "$work" t10k-images-idx3-ubyte 200 16 784
idx_head "$fm_src" "$work" t10k-labels-idx1-ubyte 200 8 1

# 2000 samples, batch 32: 63 steps per epoch (the last one partial); backups every 7 steps, so most land mid-epoch.
fit() {  # fit BACKUP_DIR [env...]; exec, so that the PID a background `( fit ... ) &` gives is trainkit's own
  local dir="$1"; shift
  exec env "$@" "$cli" fit --train-images "$work/train-images-idx3-ubyte" --train-labels "$work/train-labels-idx1-ubyte" \
    --test-images "$work/t10k-images-idx3-ubyte" --test-labels "$work/t10k-labels-idx1-ubyte" \
    --model dense:64:relu,dropout:0.2,dense:10 --epochs 6 --batch-size 32 --seed 5 -v 2 --no-summary \
    --backup-dir "$dir" --backup-freq 7 --keep-backup
}
fail() { echo "FAIL: $*"; exit 1; }

t0="$(date +%s%N)"
(fit "$work/reference") >"$work/reference.log" 2>&1 || { cat "$work/reference.log"; fail "the uninterrupted run failed"; }
span_ms=$((($(date +%s%N) - t0) / 1000000))  # kills land anywhere in a run's lifetime, however fast this machine is
[ -f "$work/reference/latest.tkstate" ] || fail "the uninterrupted run left no final state"

resumed_step() { sed -n 's/.*BackupAndRestore: resuming from .* (step \([0-9]*\)).*/\1/p' "$1" | tail -n 1; }
last=0
run=0
check_resume() {  # the step a restart resumed from never goes back
  local step
  step="$(resumed_step "$1")"
  if [ -n "$step" ]; then
    [ "$step" -ge "$last" ] || { cat "$1"; fail "run $run resumed from step $step after one that resumed from $last"; }
    last="$step"
  fi
}

dir="$work/crashing"
RANDOM=4242  # the kill moments are random but the same sequence on every run of the test
resumes=0
finished=0
for ((k = 0; k < kills; ++k)); do
  run=$((run + 1))
  (fit "$dir") >"$work/run$run.log" 2>&1 &
  pid=$!
  delay_ms=$(((RANDOM * 32768 + RANDOM) % (span_ms + 1)))
  sleep "$((delay_ms / 1000)).$(printf '%03d' $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  status=$?
  [ "$status" -eq 137 ] || [ "$status" -eq 0 ] || { cat "$work/run$run.log"; fail "run $run exited with $status"; }
  check_resume "$work/run$run.log"
  grep -q "BackupAndRestore: resuming" "$work/run$run.log" && resumes=$((resumes + 1))
  if [ "$status" -eq 0 ]; then rm -rf "$dir"; last=0; finished=$((finished + 1)); fi  # finished first: start over
done
# The kills must have exercised the resume: some restart after a kill resumed from a backup (a run that always
# finished before its kill, or never found a backup, would show nothing).
[ "$resumes" -ge 1 ] || fail "none of the $kills restarts after a kill resumed from a backup"
for point in before_fsync before_rename after_rename; do
  run=$((run + 1))
  { (fit "$dir" TK_TEST_CRASH_AT="$point") >"$work/run$run.log" 2>&1; } 2>/dev/null  # no "Killed" notice
  status=$?
  [ "$status" -eq 137 ] || { cat "$work/run$run.log"; fail "TK_TEST_CRASH_AT=$point: expected a SIGKILL (137), got $status"; }
  check_resume "$work/run$run.log"
  ls "$dir"/*.tk-tmp-* >/dev/null 2>&1 && [ "$point" = after_rename ] && fail "a temporary is left after the rename"
done
run=$((run + 1))
(fit "$dir") >"$work/run$run.log" 2>&1 || { cat "$work/run$run.log"; fail "the final run failed"; }
check_resume "$work/run$run.log"
grep -q "BackupAndRestore: resuming" "$work/run$run.log" || fail "the final run did not resume from the backup"
leftovers="$(ls -a "$dir" | grep -c 'tk-tmp' || true)"
[ "$leftovers" -eq 0 ] || { ls -la "$dir"; fail "$leftovers temporary file(s) left in the backup folder"; }
cmp "$work/reference/latest.tkstate" "$dir/latest.tkstate" ||
  fail "the final state after $run runs differs from the uninterrupted run's"
echo "kill_resume: $run runs ($kills killed at random within ${span_ms} ms, $resumes of them resumed from a backup," \
  "$finished finished before the kill; 3 killed at crash points); final state identical to the uninterrupted run"
