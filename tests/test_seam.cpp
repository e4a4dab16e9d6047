// The host/device seam: tensors in device memory refuse host access, program inputs are written only by
// a BatchStager, narrow data (uint8, float16) stays narrow and is converted (and rescaled) at staging,
// models know their device and dtype policy, and conversions cover every pair of dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "graph/program.h"
#include "nn/compiler/programs.h"
#include "trainkit/core/convert.h"
#include "trainkit/trainkit.h"

namespace {

using tk::DType;
using tk::Tensor;
namespace layers = tk::layers;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---------------------------------------------------------------- host access

TEST(Seam, DataOnATensorInDeviceMemoryThrowsNamingTheDevice) {
  std::vector<float> fake(6, 1.0f);  // stands in for device memory: it is never dereferenced
  Tensor t = Tensor::from_blob(fake.data(), {2, 3}, DType::f32, tk::Device::cuda(0));
  EXPECT_FALSE(t.on_host());
  try {
    (void)t.data<float>();
    FAIL() << "data<float>() on a cuda:0 tensor must throw";
  } catch (const tk::InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "to_device")) << e.what();
  }
  const Tensor& ct = t;
  EXPECT_THROW((void)ct.data<float>(), tk::InvalidArgument);
  // The same memory labelled as host memory is readable.
  Tensor h = Tensor::from_blob(fake.data(), {2, 3}, DType::f32, tk::Device::cpu());
  EXPECT_EQ(h.data<float>()[5], 1.0f);
}

// ---------------------------------------------------------------- program inputs only through a stager

template <typename P>
concept HasRawData = requires(P& p) {
  p.data(0);
};
template <typename P>
concept HasDataF = requires(P& p) {
  p.data_f(0);
};
template <typename P>
concept CanReadInputSlot = requires(P& p) {
  p.storage(0);
};

TEST(Seam, ProgramInputsCanOnlyBeWrittenThroughABatchStager) {
  // No raw accessors on Program; InputAccess (the key to input memory) cannot be made outside BatchStager.
  static_assert(!HasRawData<tk::graph::Program>, "Program must not expose its arena");
  static_assert(!HasDataF<tk::graph::Program>, "Program must not expose its arena");
  static_assert(!CanReadInputSlot<tk::graph::Program>, "Program::storage must stay private");
  static_assert(!std::is_default_constructible_v<tk::graph::InputAccess>, "only BatchStager makes an InputAccess");
  SUCCEED();
}

TEST(Seam, OutputsAreReadThroughTheProgramAndOnlyOutputs) {
  tk::graph::Graph g;
  Tensor a = Tensor::full({4}, 2.0f), b = Tensor::full({4}, 3.0f);
  const int va = g.variable("a", a), vb = g.variable("b", b);
  const int m = g.add(tk::graph::Op::Mul, {va, vb});
  const int s = g.add(tk::graph::Op::Scale, {m}, [] {
    tk::graph::Attrs at;
    at.scale = 0.5f;
    at.offset = 1.0f;
    return at;
  }());
  tk::graph::Program p(std::move(g), {s}, {}, tk::Device::cpu());
  tk::graph::ExecContext ctx;
  p.run(ctx);
  const Tensor out = p.output(s);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out.data<float>()[i], 4.0f);  // 2 * 3 * 0.5 + 1
  EXPECT_THROW(p.output(m), tk::InvalidArgument);  // not an output: its memory may hold something else by now
  tk::graph::ExecContext wrong;
  wrong.device = tk::Device::cuda(0);
  EXPECT_THROW(p.run(wrong), tk::InvalidArgument);
}

// ---------------------------------------------------------------- conversions

TEST(Seam, TensorToCoversEveryPairOfDtypes) {
  const std::vector<float> values{0.0f, 1.0f, -2.0f, 3.5f, 100.0f, 255.0f};
  Tensor f = Tensor::from_vector<float>({6}, values);
  for (int a = 0; a < tk::kDTypeCount; ++a)
    for (int b = 0; b < tk::kDTypeCount; ++b) {
      const auto from = static_cast<DType>(a), to = static_cast<DType>(b);
      Tensor x = f.to(from);
      Tensor y = x.to(to);
      ASSERT_EQ(y.dtype(), to);
      ASSERT_EQ(y.numel(), 6);
      // Back to float32, every value representable in both dtypes survives.
      Tensor back = y.to(DType::f32);
      for (int i = 0; i < 6; ++i) {
        float expect = values[static_cast<size_t>(i)];
        auto clamp_to = [&](DType t, float v) {
          if (t == DType::boolean) return v != 0.0f ? 1.0f : 0.0f;
          if (t == DType::u8) return std::trunc(std::min(std::max(v, 0.0f), 255.0f));
          if (t == DType::i32 || t == DType::i64) return std::trunc(v);
          return v;
        };
        expect = clamp_to(to, clamp_to(from, expect));
        EXPECT_EQ(back.data<float>()[i], expect)
            << tk::dtype_name(from) << " -> " << tk::dtype_name(to) << " [" << i << "]";
      }
    }
}

TEST(Seam, FloatToIntegerSaturatesAndNanBecomesZero) {
  const float in[4] = {std::numeric_limits<float>::quiet_NaN(), 1e20f, -1e20f, -3.7f};
  int32_t out[4];
  tk::convert_elements(in, DType::f32, out, DType::i32, 4);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(out[2], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[3], -3);
  uint8_t u[4];
  tk::convert_elements(in, DType::f32, u, DType::u8, 4);
  EXPECT_EQ(u[1], 255);
  EXPECT_EQ(u[3], 0);
}

// ---------------------------------------------------------------- narrow data, converted at staging

struct Data {
  Tensor x8, xf, y;  // uint8 pixels, the same as float32 / 255, int32 labels
};

Data make_data(int64_t n, int64_t d) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> px(0, 255);
  Data r{Tensor({n, d}, DType::u8), Tensor({n, d}, DType::f32), Tensor({n}, DType::i32)};
  for (int64_t i = 0; i < n; ++i) {
    int64_t sum = 0;
    for (int64_t j = 0; j < d; ++j) {
      const int v = px(gen);
      r.x8.data<uint8_t>()[i * d + j] = static_cast<uint8_t>(v);
      r.xf.data<float>()[i * d + j] = static_cast<float>(v) * (1.0f / 255.0f);
      sum += v;
    }
    r.y.data<int32_t>()[i] = static_cast<int32_t>(sum % 3);
  }
  return r;
}

std::vector<double> losses(tk::Sequential& m, const Tensor& x, const Tensor& y) {
  m.compile(tk::optimizers::SGD({.learning_rate = 0.05f}),
            tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  tk::History h = m.fit(x, y, {.batch_size = 16, .epochs = 3, .verbose = 0, .shuffle = false});
  return h.history.at("loss");
}

TEST(Seam, Uint8DataWithRescalingTrainsLikePrescaledFloats) {
  const Data d = make_data(64, 12);
  tk::utils::set_random_seed(3);
  tk::Sequential a({layers::Input({12}), layers::Rescaling(1.0f / 255), layers::Dense(8, "relu"), layers::Dense(3)});
  tk::utils::set_random_seed(3);
  tk::Sequential b({layers::Input({12}), layers::Dense(8, "relu"), layers::Dense(3)});
  const std::vector<double> la = losses(a, d.x8, d.y), lb = losses(b, d.xf, d.y);
  ASSERT_EQ(la.size(), lb.size());
  // The fused scaling computes x * (1/255) in float32, exactly as the pre-scaled data was made.
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "epoch " << i;
  EXPECT_EQ(d.x8.dtype(), DType::u8);  // the data itself was never widened
}

TEST(Seam, RescalingReadingAnInputIsFoldedIntoStaging) {
  tk::Sequential m({layers::Input({5}), layers::Rescaling(2.0f, 1.0f), layers::Dense(2)});
  m.compile(tk::optimizers::SGD(), tk::losses::MeanSquaredError());
  // The plan's program has no Scale op: the factor moved into staging.
  tk::nn::ProgramCache::Traced t = m.trainer().programs().trace(tk::nn::ProgramKind::predict, 4, false);
  ASSERT_EQ(t.compiled->x_scale.size(), 1u);
  EXPECT_EQ(t.compiled->x_scale[0].scale, 2.0f);
  EXPECT_EQ(t.compiled->x_scale[0].offset, 1.0f);
  const std::vector<int> order = tk::graph::schedule(t.g, t.keep);
  for (int id : order) EXPECT_NE(t.g[id].op, tk::graph::Op::Scale) << t.g[id].name;
  // And predictions match applying the layer by hand.
  Tensor x = Tensor::full({4, 5}, 0.25f);
  Tensor ones = Tensor::full({4, 5}, 1.5f);  // 0.25 * 2 + 1
  tk::Sequential ref({layers::Input({5}), layers::Dense(2)});
  ref.set_weights(m.get_weights());
  const Tensor p = m.predict(x), q = ref.predict(ones);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.data<float>()[i], q.data<float>()[i]);
}

// Under a mixed policy the input is cast to 16 bits before the Rescaling: the scale is staged all the same, and the
// cast with it (the program's input is 16-bit; no Scale, no Cast op).
TEST(Seam, RescalingAfterAMixedPolicysInputCastIsFoldedIntoStaging) {
  const Data d = make_data(64, 12);
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    SCOPED_TRACE(policy);
    tk::mixed_precision::set_global_policy(policy);
    tk::Sequential m({layers::Input({12}), layers::Rescaling(1.0f / 255), layers::Dense(8, "relu"), layers::Dense(3)});
    m.compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    tk::nn::ProgramCache::Traced t = m.trainer().programs().trace(tk::nn::ProgramKind::predict, 4, false);
    ASSERT_EQ(t.compiled->x_scale.size(), 1u);
    EXPECT_EQ(t.compiled->x_scale[0].scale, 1.0f / 255);
    // ... and the cast too: staging writes the batch in the policy's 16-bit dtype.
    const DType t16 = std::string(policy) == "mixed_bfloat16" ? DType::bf16 : DType::f16;
    EXPECT_EQ(t.g[t.compiled->x[0]].dtype, t16);
    for (int id : tk::graph::schedule(t.g, t.keep)) {
      EXPECT_NE(t.g[id].op, tk::graph::Op::Scale) << t.g[id].name;
      if (t.g[id].op == tk::graph::Op::Cast)  // the weights' casts stay
        EXPECT_NE(t.g[t.g[id].inputs[0]].op, tk::graph::Op::Input) << t.g[id].name;
    }
    // Trains as the pre-scaled floats do (the input cast rounds x * scale once, as the unfused Scale would round the
    // product of the exact 16-bit pixel): bit for bit.
    tk::utils::set_random_seed(3);
    tk::Sequential a({layers::Input({12}), layers::Rescaling(1.0f / 255), layers::Dense(8, "relu"), layers::Dense(3)});
    tk::utils::set_random_seed(3);
    tk::Sequential b({layers::Input({12}), layers::Dense(8, "relu"), layers::Dense(3)});
    EXPECT_EQ(losses(a, d.x8, d.y), losses(b, d.xf, d.y));
  }
  tk::mixed_precision::set_global_policy("float32");
}

TEST(Seam, Float16DataTrainsLikeFloat32DataRoundedToFloat16) {
  const Data d = make_data(64, 12);
  Tensor x16 = d.xf.to(DType::f16);
  Tensor x32 = x16.to(DType::f32);  // the same values, stored as float32
  tk::utils::set_random_seed(5);
  tk::Sequential a({layers::Input({12}), layers::Dense(8, "relu"), layers::Dense(3)});
  tk::utils::set_random_seed(5);
  tk::Sequential b({layers::Input({12}), layers::Dense(8, "relu"), layers::Dense(3)});
  const std::vector<double> la = losses(a, x16, d.y), lb = losses(b, x32, d.y);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "epoch " << i;
}

// ---------------------------------------------------------------- where and how a model runs

TEST(Seam, ModelsKnowTheirDeviceAndDtypePolicy) {
  tk::Sequential m({layers::Input({3}), layers::Dense(2)});
  EXPECT_EQ(m.device(), tk::Device::cpu());
  EXPECT_EQ(m.dtype_policy(), "float32");
  try {
    m.set_device(tk::Device::cuda(0));
    FAIL() << "this build has no CUDA compute backend";
  } catch (const tk::Unsupported& e) {
    EXPECT_TRUE(contains(e.what(), "cuda")) << e.what();
  }
  EXPECT_THROW(m.set_dtype_policy("float16"), tk::Unsupported);  // 16-bit variables: use mixed_float16
  EXPECT_THROW(m.set_dtype_policy("float64x"), tk::InvalidArgument);
  m.set_dtype_policy("mixed_float16");
  EXPECT_EQ(m.layer_compute_dtype(*m.layers()[1]), tk::DType::f32) << "the output layer stays float32";
  m.set_dtype_policy("float32");
  m.set_device(tk::Device::cpu());
}

TEST(Seam, TheOptimizerNamesItsUpdateOpNotItsName) {
  // A renamed optimizer keeps its rule: the program builder reads the op from the optimizer's config.
  EXPECT_EQ(tk::optimizers::SGD()->config().update_op, tk::graph::Op::SgdUpdate);
  EXPECT_EQ(tk::optimizers::Adam()->config().update_op, tk::graph::Op::AdamUpdate);
  EXPECT_EQ(tk::optimizers::AdamW()->config().update_op, tk::graph::Op::AdamUpdate);
  EXPECT_EQ(tk::optimizers::RMSprop()->config().update_op, tk::graph::Op::RmspropUpdate);
}

// ---------------------------------------------------------------- per-step scalars and gated updates

// global_clipnorm scales every gradient by min(1, c / ||all gradients||): one SGD step equals plain SGD with
// the gradients scaled by hand, the norm taken from an unclipped twin's gradients (w_before - w_after) / lr.
TEST(Seam, GlobalClipnormScalesAllGradientsByOneNorm) {
  const Data d = make_data(32, 12);
  auto step = [&](float clip) {
    tk::utils::set_random_seed(11);
    tk::Sequential m({layers::Input({12}), layers::Dense(4, "tanh"), layers::Dense(3)});
    m.compile(tk::optimizers::SGD({{.global_clipnorm = clip}, 0.1f}),
              tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    const std::vector<Tensor> before = m.get_weights();
    m.train_on_batch({d.xf}, {d.y});
    std::vector<std::vector<float>> grads;
    const std::vector<Tensor> after = m.get_weights();
    for (size_t i = 0; i < before.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(before[i].numel()));
      for (size_t k = 0; k < g.size(); ++k) g[k] = (before[i].data<float>()[k] - after[i].data<float>()[k]) / 0.1f;
      grads.push_back(g);
    }
    return grads;
  };
  const auto plain = step(0.0f);
  double sq = 0;
  for (const auto& g : plain)
    for (float v : g) sq += double(v) * v;
  const double norm = std::sqrt(sq);
  ASSERT_GT(norm, 0.2);
  const float clip = static_cast<float>(norm / 4);  // clipping is active: the factor is 1/4
  const auto clipped = step(clip);
  for (size_t i = 0; i < plain.size(); ++i)
    for (size_t k = 0; k < plain[i].size(); ++k)
      EXPECT_NEAR(clipped[i][k], plain[i][k] * 0.25f, 2e-5f + 1e-4f * std::fabs(plain[i][k])) << i << "," << k;
  EXPECT_THROW(tk::optimizers::SGD({{.clipnorm = 1.0f, .global_clipnorm = 1.0f}}), tk::InvalidArgument);
}

// global_clipnorm set, then cleared, after the training program was built (as a callback may do): each next step
// runs under the optimizer's config as it is then, not as it was when the program was built.
TEST(Seam, GlobalClipnormChangedAfterTheProgramWasBuiltTakesEffect) {
  const Data d = make_data(32, 12);
  tk::utils::set_random_seed(11);
  tk::Sequential m({layers::Input({12}), layers::Dense(4, "tanh"), layers::Dense(3)});
  m.compile(tk::optimizers::SGD({{}, 0.1f}), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const std::vector<Tensor> start = m.get_weights();
  auto step = [&] {  // one step from the same weights: (w_before - w_after) / lr, flattened
    m.set_weights(start);
    m.train_on_batch({d.xf}, {d.y});
    const std::vector<Tensor> after = m.get_weights();
    std::vector<float> g;
    for (size_t i = 0; i < start.size(); ++i)
      for (int64_t k = 0; k < start[i].numel(); ++k)
        g.push_back((start[i].data<float>()[k] - after[i].data<float>()[k]) / 0.1f);
    return g;
  };
  const std::vector<float> plain = step();
  double sq = 0;
  for (float v : plain) sq += double(v) * v;
  ASSERT_GT(std::sqrt(sq), 0.2);
  m.optimizer()->config().global_clipnorm = static_cast<float>(std::sqrt(sq) / 4);  // the factor is 1/4
  const std::vector<float> clipped = step();
  m.optimizer()->config().global_clipnorm = 0.0f;
  const std::vector<float> unclipped = step();
  ASSERT_EQ(clipped.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    EXPECT_NEAR(clipped[k], plain[k] * 0.25f, 2e-5f + 1e-4f * std::fabs(plain[k])) << k;
    EXPECT_EQ(unclipped[k], plain[k]) << k;
  }
}

// A gated update skips the whole step when any gradient is not finite (what loss scaling needs), and reads
// the learning rate from the step's scalars in device memory, not from the kernel call.
TEST(Seam, UpdatesGatedOnAllGradientsSkipANonFiniteStep) {
  using tk::graph::Op;
  tk::graph::UpdateConfig cfg;
  cfg.update_op = Op::SgdUpdate;
  cfg.skip_nonfinite = true;
  Tensor w1 = Tensor::full({3}, 1.0f), w2 = Tensor::full({2}, 1.0f);
  Tensor g1 = Tensor::full({3}, 0.5f), g2 = Tensor::full({2}, 0.5f);
  tk::graph::Graph g;
  const int vw1 = g.variable("w1", w1), vw2 = g.variable("w2", w2);
  const int vg1 = g.variable("g1", g1), vg2 = g.variable("g2", g2);
  tk::graph::Attrs ca;
  ca.update = &cfg;
  const int control = g.add(Op::StepControl, {vg1, vg2}, ca, "control");
  tk::graph::Attrs ua;
  ua.update = &cfg;
  ua.gated = true;
  // SGD without momentum: no slot (graph::update_slot_mask)
  const int u1 = g.add(Op::SgdUpdate, {vw1, vg1, control}, ua, "w1/update");
  const int u2 = g.add(Op::SgdUpdate, {vw2, vg2, control}, ua, "w2/update");
  tk::graph::Program p(std::move(g), {control}, {u1, u2}, tk::Device::cpu());
  tk::graph::ExecContext ctx;
  ctx.scalars.learning_rate = 0.2f;
  p.run(ctx);
  EXPECT_FLOAT_EQ(w1.data<float>()[0], 0.9f);  // 1 - 0.2 * 0.5
  EXPECT_FLOAT_EQ(w2.data<float>()[1], 0.9f);
  EXPECT_EQ(p.output(control).data<float>()[0], 1.0f);
  g2.data<float>()[1] = std::numeric_limits<float>::infinity();  // one bad element anywhere
  p.run(ctx);
  EXPECT_EQ(p.output(control).data<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(w1.data<float>()[0], 0.9f) << "no variable may move in a skipped step";
  EXPECT_FLOAT_EQ(w2.data<float>()[0], 0.9f);
  g2.data<float>()[1] = 0.5f;
  ctx.scalars.learning_rate = 0.4f;  // a new learning rate reaches the same compiled program
  p.run(ctx);
  EXPECT_FLOAT_EQ(w1.data<float>()[0], 0.7f);
}

}  // namespace
