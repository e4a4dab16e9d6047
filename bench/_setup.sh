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
  local isa
  isa="$(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, ISA: ${isa% }; $(date -u +%F)" >&2
}
