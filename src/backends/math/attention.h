// The fused attention's per-score rules (graph/attention_rules.h), one definition for the CUDA kernels
// (backends/cuda/attention.cu, which run them a score at a time) and the CPU kernels (backends/cpu/attention.cpp,
// which run the same rules a block of scores at a time in vector lanes): which keys a query sees, the online
// softmax's step, and a row's logsumexp.
//
//   float m = -INFINITY, l = 0.0f;            // a query row's running max and sum
//   float alpha, p;
//   tk::math::online_softmax_step(s, &m, &l, &alpha, &p);   // earlier sums times alpha, this score's weight p
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

// Query step i sees key step j: not after it when causal, and not masked (mask_row: the (S) row of query i's mask,
// or null).
TK_HD bool attention_sees(bool causal, const float* mask_row, int64_t i, int64_t j) {
  return !(causal && j > i) && !(mask_row && mask_row[j] == 0.0f);
}

// One seen score s into a row's running max m and sum l: alpha, what the earlier sums (and the output accumulated
// with them) are multiplied by, and p, this score's weight. A NaN score makes the row NaN; while every score so far
// is -inf the row stays empty (l = 0, p = 0).
TK_HD void online_softmax_step(float s, float* m, float* l, float* alpha, float* p) {
  const float m_new = (s != s || *m != *m) ? NAN : (s > *m ? s : *m);
  if (m_new == -INFINITY) {
    *alpha = 1.0f, *p = 0.0f;
    return;
  }
  *alpha = expf(*m - m_new);  // 0 for the first finite score (m = -inf)
  *p = expf(s - m_new);
  *l = *l * *alpha + *p;
  *m = m_new;
}

// A row's logsumexp from its max and sum: -inf when it saw no key (its P row is 0), NaN when every score it saw was
// -inf (0 / 0, as softmax).
TK_HD float attention_lse(float m, float l, bool seen) { return !seen ? -INFINITY : l == 0.0f ? NAN : m + logf(l); }

// A score's softmax weight from its row's logsumexp (0 for a row that saw no key).
TK_HD float attention_weight(float s, float lse) { return lse == -INFINITY ? 0.0f : expf(s - lse); }

}  // namespace tk::math
