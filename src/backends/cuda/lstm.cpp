// The fused LSTM ops on CUDA (graph/lstm_rules.h): per step one cuBLASLt GEMM (h U forward, dz U^T backward) and one
// element pass (lstm.cu), queued on the compute stream. float32; 16-bit through widen.cpp.
#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/gemm_cublaslt.h"
#include "backends/cuda/lstm_launchers.h"
#include "graph/kernel.h"
#include "graph/lstm_rules.h"

namespace tk::cuda {

int sm_count(int index);  // cuda_kernels.cpp

namespace {
using cpu::Epilogue;
using cpu::GemmShape;
using graph::KernelArgs;
using graph::LstmLayout;
using graph::Op;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// [cuBLASLt's workspace][(N, 4u) h U, or the (N, u) dh and dc carried between steps]
size_t lstm_workspace(const graph::Graph& g, int node) {
  const LstmLayout L = graph::lstm_layout(g, node);
  return align256(gemm_workspace_bytes()) + sizeof(float) * static_cast<size_t>(4 * L.state()) + 256;
}
float* buffers(const KernelArgs& a) {
  const auto p = reinterpret_cast<uintptr_t>(a.workspace) + align256(gemm_workspace_bytes());
  return reinterpret_cast<float*>((p + 255) / 256 * 256);
}

void copy(float* dst, const float* src, int64_t n, const KernelArgs& a) {
  check(cudaMemcpyAsync(dst, src, sizeof(float) * static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                        static_cast<cudaStream_t>(a.ctx.stream)),
        "cudaMemcpyAsync", "LstmSequence '" + a.node.name + "'");
}

void lstm_sequence(const KernelArgs& a) {
  const LstmLayout L = graph::lstm_layout(a.g, a.node);
  const int64_t n = L.batch, u = L.units, s = L.state();
  const int sms = sm_count(a.ctx.device.index);
  const float* proj = a.input<float>(0);  // (T * N, 4u), time-major
  const float* w = a.input<float>(1);     // (u, 4u)
  float* y = a.output<float>();           // (6T + 2, N, u)
  float* hu = buffers(a);                 // (N, 4u)
  copy(y + L.h(L.init_row()), a.input<float>(2), s, a);
  copy(y + L.c(L.init_row()), a.input<float>(3), s, a);
  const GemmShape shape{n, 4 * u, u, false, false, Epilogue::none};
  for (int64_t step = 0; step < L.steps; ++step) {
    const int64_t t = L.reverse ? L.steps - 1 - step : step;
    const int64_t prev = L.prev_row(t), out = L.out_row(t);
    gemm(shape, y + L.h(prev), w, nullptr, hu, 0.0f, a.workspace, a.ctx.device.index, a.ctx.stream, a.node);
    launch_lstm_cell(proj + t * 4 * s, hu, y + L.c(prev), y + L.gates(t), y + L.c(out), y + L.h(out), n, u, sms,
                     a.ctx.stream);
  }
}

void lstm_sequence_grad(const KernelArgs& a) {
  const LstmLayout L = graph::lstm_layout(a.g, a.node);
  const int64_t n = L.batch, u = L.units, s = L.state();
  const int sms = sm_count(a.ctx.device.index);
  const float* dy = a.input<float>(0);  // (6T + 2, N, u)
  const float* y = a.input<float>(1);   // (6T + 2, N, u)
  const float* w = a.input<float>(2);   // (u, 4u)
  float* d = a.output<float>();         // (T + 1, N, 4u)
  float* dh = buffers(a);               // (N, u)
  float* dc = dh + s;                   // (N, u)
  check(cudaMemsetAsync(dh, 0, sizeof(float) * static_cast<size_t>(2 * s), static_cast<cudaStream_t>(a.ctx.stream)),
        "cudaMemsetAsync", "LstmSequenceGrad '" + a.node.name + "'");
  const GemmShape shape{n, u, 4 * u, false, true, Epilogue::none};
  for (int64_t step = L.steps - 1; step >= 0; --step) {
    const int64_t t = L.reverse ? L.steps - 1 - step : step;
    const int64_t prev = L.prev_row(t), out = L.out_row(t);
    float* dz = d + t * 4 * s;
    launch_lstm_cell_grad(y + L.gates(t), y + L.c(out), y + L.c(prev), dy + L.h(out), dy + L.c(out), dy + L.gates(t),
                          dh, dc, dz, n, u, sms, a.ctx.stream);
    gemm(shape, dz, w, nullptr, dh, 0.0f, a.workspace, a.ctx.device.index, a.ctx.stream, a.node);  // dz U^T
  }
  launch_lstm_initial_grad(dy + L.h(L.init_row()), dy + L.c(L.init_row()), dh, dc, d + L.dh0(), s, sms, a.ctx.stream);
}

}  // namespace

void register_lstm_kernels() {
  graph::register_kernel(DeviceKind::cuda, Op::LstmSequence, DType::f32, lstm_sequence);
  graph::register_kernel(DeviceKind::cuda, Op::LstmSequenceGrad, DType::f32, lstm_sequence_grad);
  graph::register_workspace(DeviceKind::cuda, Op::LstmSequence, lstm_workspace);
  graph::register_workspace(DeviceKind::cuda, Op::LstmSequenceGrad, lstm_workspace);
}

}  // namespace tk::cuda
#endif
