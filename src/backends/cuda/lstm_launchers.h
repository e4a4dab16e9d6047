// Launchers of the fused LSTM ops' element passes (lstm.cu), plain C++ for lstm.cpp (host compiler), which runs the
// steps and their cuBLASLt GEMMs. Layout: graph/lstm_rules.h; math: backends/math/lstm.h. Each queues on `stream`.
#pragma once
#include <cstdint>

namespace tk::cuda {

using Stream = void*;  // cudaStream_t

// One forward step over (n, u): z = proj + hu (both (n, 4u)) -> gates (n, 4u), c and h (n, u).
void launch_lstm_cell(const float* proj, const float* hu, const float* c_prev, float* gates, float* c, float* h,
                      int64_t n, int64_t u, int sms, Stream stream);
// One backward step: dh = dy_h + dh (the next step's), dc += dy_c, dy_g (n, 4u) the gate rows' -> dz (n, 4u); dc
// becomes dc_prev (in place).
void launch_lstm_cell_grad(const float* gates, const float* c, const float* c_prev, const float* dy_h,
                           const float* dy_c, const float* dy_g, const float* dh, float* dc, float* dz, int64_t n,
                           int64_t u, int sms, Stream stream);
// out(4s) = [dy_h0 + dh, dy_c0 + dc, 0, 0]: the gradient's last row (s = n * u).
void launch_lstm_initial_grad(const float* dy_h0, const float* dy_c0, const float* dh, const float* dc, float* out,
                              int64_t s, int sms, Stream stream);

}  // namespace tk::cuda
