// TK_HD marks math that both compilers build: the host compiler for the CPU kernels (backends/cpu/) and nvcc for
// the CUDA kernels (backends/cuda/), so the CPU tests prove the code the GPU runs (one definition, two drivers).
// The same code, not always the same bits: the transcendentals are each platform's (glibc's expf against CUDA's,
// within 2 ulp), and each compiler decides where to fuse a multiply and an add (GCC with -march=native and nvcc
// both do), so the GPU op harness compares with tolerances.
//
//   TK_HD float relu(float x) { return x > 0.0f ? x : 0.0f; }
#pragma once

#if defined(__CUDACC__)
#define TK_HD __host__ __device__ __forceinline__
#else
#define TK_HD inline
#endif
