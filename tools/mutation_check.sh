#!/usr/bin/env bash
# Shows that the tests can fail: applies each committed mutation (tools/mutations/*.patch: a behaviour broken on
# purpose — --seed ignored, Adam's epsilon inside the square root, an allocation in a kernel, a memory plan one
# byte short, ...) to a scratch copy of the committed tree, one at a time, rebuilds, runs the tests the patch
# names, and reports whether they caught it. A developer tool, not part of CI (a rebuild per mutation).
#
#   bash tools/mutation_check.sh                      # every patch
#   bash tools/mutation_check.sh tools/mutations/seed_ignored.patch
#   TK_MUTATION_DIR=/tmp/tk-mut bash tools/mutation_check.sh   # keep the scratch copy (and its build) there
#
# Each patch starts with two comment lines read here:
#   # mutation: what it breaks
#   # tests: <binary> [args]; <binary> [args]     (binaries in the scratch build's tests/ folder)
# A mutation is caught when any of those fails; one that does not build counts as not shown (BROKEN).
# Exit status: 0 when every mutation is caught (and the unmutated tree passes the same tests), 1 otherwise.
set -euo pipefail

root="$(git rev-parse --show-toplevel)"
cd "$root"
patches=("$@")
if [ ${#patches[@]} -eq 0 ]; then patches=(tools/mutations/*.patch); fi

scratch="${TK_MUTATION_DIR:-$(mktemp -d -t tk-mutation.XXXXXX)}"
mkdir -p "$scratch" && scratch="$(cd "$scratch" && pwd)"  # absolute (a relative one is from the checkout's root)
tree="$scratch/trainkit"  # the build folder inside the tree, as in a checkout, so ccache finds the same paths
echo "scratch copy of $(git rev-parse --short HEAD): $tree"
rm -rf "$tree" && mkdir -p "$tree"
git archive HEAD | tar -x -C "$tree"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # Paths under the base folder are hashed relative to it: the common ancestor of the checkout and the scratch
  # copy (put TK_MUTATION_DIR beside the checkout to share the checkout's cached objects).
  base="$(dirname "$root")"
  while [ "$base" != "/" ] && [ "${scratch#"$base"/}" = "$scratch" ]; do base="$(dirname "$base")"; done
  if [ "$base" != "/" ]; then export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$base}"; fi
fi
# The project's Release flags (CONTRIBUTING); TK_MUTATION_CMAKE_ARGS adds or overrides.
# shellcheck disable=SC2086
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=ON "${launcher[@]}" \
  ${TK_MUTATION_CMAKE_ARGS:-} >"$scratch/cmake.log"
jobs="${TK_MUTATION_JOBS:-2}"
build() { nice cmake --build "$tree/build" -j"$jobs" --target trainkit_tests trainkit_malloc_tests >"$scratch/build.log" 2>&1; }

field() { sed -n "s/^# $2: //p" "$1" | head -1; }

# Runs the patch's tests; prints the first failing test's name; returns 0 when all pass.
run_tests() {
  local spec="$1" cmd status=0
  IFS=';' read -ra cmds <<<"$spec"
  for cmd in "${cmds[@]}"; do
    read -ra argv <<<"$cmd"
    [ ${#argv[@]} -eq 0 ] && continue
    if ! (cd "$tree/build" && timeout 900 "tests/${argv[0]}" "${argv[@]:1}" >"$scratch/test.log" 2>&1); then
      grep -m1 '^\[  FAILED  \]' "$scratch/test.log" | sed 's/^\[  FAILED  \] //' || echo "${argv[0]} exited non-zero"
      status=1
    fi
  done
  return $status
}

echo "building the unmutated tree ..."
build || { echo "the unmutated tree does not build: $scratch/build.log"; exit 1; }
for p in "${patches[@]}"; do
  if ! run_tests "$(field "$p" tests)" >/dev/null; then
    echo "the unmutated tree fails the tests of $p ($(field "$p" tests)): fix that first"
    exit 1
  fi
done

missed=0
printf '%-40s %-8s %s\n' "mutation" "result" "caught by"
for p in "${patches[@]}"; do
  name="$(basename "$p" .patch)"
  (cd "$tree" && patch -p1 --quiet <"$root/$p")
  if ! build; then  # a mutation must compile: one that does not proves nothing
    result="BROKEN" by="does not build: $scratch/build.log"
    missed=$((missed + 1))
  elif by="$(run_tests "$(field "$p" tests)")"; then
    result="MISSED" by="$(field "$p" tests) passed: $(field "$p" mutation)"
    missed=$((missed + 1))
  else
    result="caught"
  fi
  printf '%-40s %-8s %s\n' "$name" "$result" "$by"
  (cd "$tree" && patch -p1 -R --quiet <"$root/$p")
done
build >/dev/null || true  # leave the scratch build unmutated
if [ $missed -eq 0 ]; then
  echo "all ${#patches[@]} mutations caught"
else
  echo "$missed of ${#patches[@]} mutations MISSED"
  exit 1
fi
