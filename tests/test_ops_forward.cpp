// Forward mode of the op harness (tests/op_harness.h): every case of forward_cases(), on every registered
// backend, in float32, float16 and bfloat16 where a kernel exists (a missing one must be declared in
// tests/test_op_gradients.cpp), against the cpu float32 result on the same inputs (rounded to the dtype
// first). Elementwise ops and activations must match it rounded to 16 bits bit for bit; so must every
// single-op 16-bit result on the cpu (widen.cpp: the float32 kernel on the widened inputs, one rounding).
#include <gtest/gtest.h>

#include <tuple>

#include "op_harness.h"

namespace tk::graph::harness {

void check_forward(const Case& tc, Target target, std::string* skipped, const Case* reference) {
  const std::vector<Tensor> test_in = convert_inputs(tc, generate_inputs(tc, 5), target.dtype);
  Instance test(tc, target, test_in);
  if (auto why = skip_reason(test)) {
    *skipped = *why;
    return;
  }
  // Copies, before ops in place run.
  Instance ref(reference ? *reference : tc, Target{}, convert_inputs(tc, test_in, DType::f32));
  const std::vector<Tensor> got = test.run_forward();
  const std::vector<Tensor> want = ref.run_forward();
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  // The reference against itself, from another program over copies of the inputs: deterministic, no
  // dependence on arena contents. Other targets: exact where the contract says so, else within tolerance.
  const bool exact = target.is_reference() ||
                     (!tc.rounds_intermediates &&
                      (target.kind == DeviceKind::cpu || (is_exact_op(tc.op) && !exact_on_the_cpu_only(tc.op))));
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string what = tc.label + " on " + target.name() + ": output " + std::to_string(k);
    if (exact) {
      expect_exact(got[k], want[k], what);
    } else {
      const double e = expect_close(got[k], host_f32(want[k]), tolerance(target.dtype).forward, what);
      ::testing::Test::RecordProperty("error" + std::to_string(k), std::to_string(e));
    }
  }
}

namespace {

class OpForward : public ::testing::TestWithParam<std::tuple<Case, Target>> {};

TEST_P(OpForward, MatchesCpuFloat32) {
  std::string skipped;
  check_forward(std::get<0>(GetParam()), std::get<1>(GetParam()), &skipped);
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpForward,
                         ::testing::Combine(::testing::ValuesIn(forward_cases()), ::testing::ValuesIn(targets())),
                         [](const auto& info) {
                           return param_name(std::get<0>(info.param).label + "_" + std::get<1>(info.param).name());
                         });

}  // namespace
}  // namespace tk::graph::harness
