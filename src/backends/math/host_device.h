// TK_HD marks math that both compilers build: the host compiler for the CPU kernels (backends/cpu/) and nvcc for
// the CUDA kernels (backends/cuda/), so the CPU tests prove the code the GPU runs (one definition, two drivers).
//
//   TK_HD float relu(float x) { return x > 0.0f ? x : 0.0f; }
#pragma once

#if defined(__CUDACC__)
#define TK_HD __host__ __device__ __forceinline__
#else
#define TK_HD inline
#endif
