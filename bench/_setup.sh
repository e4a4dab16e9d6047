# Sourced by the side-by-side benchmarks: the peers' virtual environment ($TK_VENV, default .venv,
# created from bench/peers/requirements.txt if missing), a Release build of the named trainkit target,
# and 2 threads for everyone. Sets VENV.
bench_setup() {
  VENV="${TK_VENV:-.venv}"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -r bench/peers/requirements.txt
  fi
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target "$1" >/dev/null
  export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F)" >&2
}
