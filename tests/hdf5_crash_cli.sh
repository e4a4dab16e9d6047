#!/usr/bin/env bash
# A damaged HDF5 file never crashes trainkit: `trainkit fit --data FILE --x /x --y /y` on one of libhdf5
# 1.10.8's known crashers (fuzz/known_crashes/hdf5_old_format/) must end with exit status 1 and a
# "trainkit: error: <file>: ..." line, as a new user would see it.
#   hdf5_crash_cli.sh TRAINKIT FILE
set -u
out=$("$1" fit --data "$2" --x /x --y /y --epochs 1 --no-summary 2>&1)
rc=$?
name=$(basename "$2")
if [ "$rc" -ne 1 ]; then echo "exit status $rc (want 1):"; echo "$out"; exit 1; fi
if ! printf '%s\n' "$out" | tail -n 1 | grep -q "^trainkit: error: .*$name"; then
  echo "last line is not one error naming $name:"; echo "$out"; exit 1
fi
printf '%s\n' "$out" | tail -n 1
