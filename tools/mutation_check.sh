#!/usr/bin/env bash
# Shows that the tests can fail: applies each committed mutation (tools/mutations/*.patch: a behaviour broken on
# purpose — --seed ignored, Adam's epsilon inside the square root, an allocation in a kernel, a memory plan one
# byte short, a ledger that overcommits by one byte, ...) one at a time, rebuilds, runs the tests the patch names,
# and reports whether they caught it. Every patch is tried (a failure does not stop the run); the last line says
# "N of M mutations caught".
#
#   bash tools/mutation_check.sh                      # every patch, in a scratch copy of the committed tree
#   bash tools/mutation_check.sh tools/mutations/seed_ignored.patch
#   TK_MUTATION_DIR=/tmp/tk-mut bash tools/mutation_check.sh   # keep the scratch copy (and its build) there
#   TK_MUTATION_BUILD=build-ci bash tools/mutation_check.sh    # CI: mutate this checkout and rebuild that (already
#                                                              # built) folder incrementally; each patch is undone
#   TK_MUTATION_SUBSET=3 bash tools/mutation_check.sh          # CI: 3 patches, a rotating window chosen by the
#                                                              # commit hash (TK_MUTATION_SEED overrides it)
#   bash tools/mutation_check.sh --check-apply                 # only check that every patch applies (seconds)
#
# Each patch starts with two comment lines read here:
#   # mutation: what it breaks
#   # tests: [NAME=VALUE ...] <binary> [args]; ...   (binaries in the build's tests/ folder; NAME=VALUE: environment)
# A mutation is caught when any of those fails; one that does not apply or does not build counts as not shown.
# Exit status: 0 when every mutation tried is caught (and the unmutated tree passes the same tests), 1 otherwise.
set -uo pipefail

root="$(git rev-parse --show-toplevel)"
cd "$root"
check_apply=0
if [ "${1:-}" = "--check-apply" ]; then
  check_apply=1
  shift
fi
patches=("$@")
if [ ${#patches[@]} -eq 0 ]; then patches=(tools/mutations/*.patch); fi

if [ $check_apply -eq 1 ]; then
  bad=0
  for p in "${patches[@]}"; do
    if ! git apply --check "$p" 2>/dev/null; then
      echo "does not apply at HEAD: $p (regenerate it: make the change, then \`git diff\` under its two comment lines)"
      bad=$((bad + 1))
    fi
  done
  echo "$((${#patches[@]} - bad)) of ${#patches[@]} mutation patches apply"
  [ $bad -eq 0 ]
  exit
fi

# A rotating subset: a window of TK_MUTATION_SUBSET patches starting where the commit hash says, so that
# consecutive commits exercise different mutations and every patch comes up every M / SUBSET commits.
if [ -n "${TK_MUTATION_SUBSET:-}" ] && [ "$TK_MUTATION_SUBSET" -lt ${#patches[@]} ]; then
  seed="${TK_MUTATION_SEED:-$(git rev-parse HEAD)}"
  start=$((16#${seed:0:7} % ${#patches[@]}))
  chosen=()
  for ((i = 0; i < TK_MUTATION_SUBSET; ++i)); do chosen+=("${patches[$(((start + i) % ${#patches[@]}))]}"); done
  echo "rotating subset of ${TK_MUTATION_SUBSET} of ${#patches[@]} patches (seed ${seed:0:7})"
  patches=("${chosen[@]}")
fi

if [ -n "${TK_MUTATION_BUILD:-}" ]; then
  # In place: the checkout is mutated and restored (git apply -R) and the build folder rebuilt incrementally.
  tree="$root"
  build_dir="$(cd "$TK_MUTATION_BUILD" && pwd)"
  scratch="$(mktemp -d -t tk-mutation.XXXXXX)"
  git diff --quiet HEAD -- src include || {
    echo "TK_MUTATION_BUILD mutates the checkout, which has local changes under src/ or include/: commit them"
    exit 1
  }
  echo "mutating the checkout at $(git rev-parse --short HEAD), building in $build_dir"
else
  scratch="${TK_MUTATION_DIR:-$(mktemp -d -t tk-mutation.XXXXXX)}"
  mkdir -p "$scratch" && scratch="$(cd "$scratch" && pwd)"  # absolute (a relative one is from the checkout's root)
  tree="$scratch/trainkit"  # the build folder inside the tree, as in a checkout, so ccache finds the same paths
  build_dir="$tree/build"
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
  cmake -S "$tree" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=ON "${launcher[@]}" \
    ${TK_MUTATION_CMAKE_ARGS:-} >"$scratch/cmake.log" || { echo "cmake failed: $scratch/cmake.log"; exit 1; }
fi
jobs="${TK_MUTATION_JOBS:-2}"

field() { sed -n "s/^# $2: //p" "$1" | head -1; }

# The test binaries a patch's tests name (what to build for it).
targets_of() {
  local spec="$1" cmd word
  IFS=';' read -ra cmds <<<"$spec"
  for cmd in "${cmds[@]}"; do
    for word in $cmd; do
      [[ "$word" == *=* ]] && continue
      echo "$word"
      break
    done
  done | sort -u
}
build() {  # build TARGET...
  # shellcheck disable=SC2046
  nice cmake --build "$build_dir" -j"$jobs" $(printf -- '--target %s ' "$@") >"$scratch/build.log" 2>&1
}

# Runs the patch's tests; prints the first failing test's name; returns 0 when all pass.
run_tests() {
  local spec="$1" cmd status=0
  IFS=';' read -ra cmds <<<"$spec"
  for cmd in "${cmds[@]}"; do
    read -ra words <<<"$cmd"
    [ ${#words[@]} -eq 0 ] && continue
    local env=() argv=()
    for w in "${words[@]}"; do
      if [ ${#argv[@]} -eq 0 ] && [[ "$w" == *=* ]]; then env+=("$w"); else argv+=("$w"); fi
    done
    if ! (cd "$build_dir" && env "${env[@]}" timeout 900 "tests/${argv[0]}" "${argv[@]:1}" >"$scratch/test.log" 2>&1); then
      grep -m1 '^\[  FAILED  \]' "$scratch/test.log" | sed 's/^\[  FAILED  \] //' || echo "${argv[0]} exited non-zero"
      status=1
    fi
  done
  return $status
}

apply() { (cd "$tree" && git apply "$@"); }
current=""
undo() { if [ -n "$current" ]; then apply -R "$root/$current" && current=""; fi; }
trap undo EXIT
trap 'undo; exit 130' INT TERM

all_targets=()
for p in "${patches[@]}"; do mapfile -t -O ${#all_targets[@]} all_targets < <(targets_of "$(field "$p" tests)"); done
mapfile -t all_targets < <(printf '%s\n' "${all_targets[@]}" | sort -u)
started=$SECONDS
echo "building the unmutated tree (${all_targets[*]}) ..."
build "${all_targets[@]}" || { echo "the unmutated tree does not build: $scratch/build.log"; exit 1; }
for p in "${patches[@]}"; do
  if ! run_tests "$(field "$p" tests)" >/dev/null; then
    echo "the unmutated tree fails the tests of $p ($(field "$p" tests)): fix that first"
    exit 1
  fi
done

caught=0
printf '%-40s %-8s %6s  %s\n' "mutation" "result" "time" "caught by"
for p in "${patches[@]}"; do
  name="$(basename "$p" .patch)"
  t0=$SECONDS
  mapfile -t targets < <(targets_of "$(field "$p" tests)")
  if ! apply --check "$root/$p" 2>/dev/null; then
    result="NOAPPLY" by="does not apply at HEAD: regenerate it"
  elif ! { apply "$root/$p" && current="$p" && build "${targets[@]}"; }; then
    result="BROKEN" by="does not build: $scratch/build.log"  # a mutation must compile: one that does not proves nothing
  elif by="$(run_tests "$(field "$p" tests)")"; then
    result="MISSED" by="$(field "$p" tests) passed: $(field "$p" mutation)"
  else
    result="caught"
    caught=$((caught + 1))
  fi
  undo
  printf '%-40s %-8s %5ds  %s\n' "$name" "$result" $((SECONDS - t0)) "$by"
done
build "${all_targets[@]}" >/dev/null || true  # leave the build unmutated
echo "($((SECONDS - started)) s)"
echo "$caught of ${#patches[@]} mutations caught"
[ $caught -eq ${#patches[@]} ]
