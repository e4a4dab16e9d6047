// The op harness's machinery (tests/op_harness.h): targets, inputs, building and running a case, comparisons.
// Also checks of the comparisons themselves, so a harness that compares nothing cannot pass silently.
#include <gtest/gtest-spi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "op_harness.h"
#include "runtime/cuda_device.h"

namespace tk::graph::harness {

std::string Target::name() const {
  return std::string(kind == DeviceKind::cpu ? "cpu" : "cuda") + "_" + std::string(dtype_name(dtype));
}

std::vector<DeviceKind> backend_kinds() {
  std::vector<DeviceKind> kinds;
  for (int k = 0; k < kDeviceKindCount; ++k)
    if (has_backend(static_cast<DeviceKind>(k))) kinds.push_back(static_cast<DeviceKind>(k));
  return kinds;
}

bool device_present(DeviceKind kind) {
  return kind == DeviceKind::cpu || (kind == DeviceKind::cuda && !runtime::cuda_devices().devices.empty());
}

std::vector<DeviceKind> runnable_kinds() {
  std::vector<DeviceKind> kinds;
  for (DeviceKind k : backend_kinds())
    if (device_present(k)) kinds.push_back(k);
  return kinds;
}

std::vector<Target> targets() {
  std::vector<Target> t;
  for (DeviceKind k : runnable_kinds())
    for (DType d : kFloatDTypes) t.push_back({k, d});
  return t;
}

// Multiples of the dtype's unit roundoff u (2^-11 float16, 2^-8 bfloat16). Relative to the tensor's largest
// magnitude, one rounding of the output costs at most u/2; the cpu's worst cases measured in this harness
// (widen.cpp: float32 math, one rounding per op) are, forward (composites rounding BnStats): 0.6 u float16,
// 0.7 u bfloat16; gradient programs (a forward value, the gradient op's operands and its output rounded):
// 0.93 u float16 (MatMul), 1.1 u bfloat16 (Sigmoid). Forward allows 4 u and gradients 8 u: room for another
// backend's summation order and fused math, not for a kernel that accumulates in 16 bits or rounds twice.
// float32 on another backend: summation order and library transcendentals, ~170 ulps (2^-24) of the magnitude.
Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {4 * std::ldexp(1.0, -11), 8 * std::ldexp(1.0, -11)};
    case DType::bf16:
      return {4 * std::ldexp(1.0, -8), 8 * std::ldexp(1.0, -8)};
    default:
      return {0.0, 0.0};
  }
}

DType input_dtype(const Case& c, size_t input, DType under_test) {
  if (input < c.dtypes.size() && c.dtypes[input]) return *c.dtypes[input];
  return under_test;
}

namespace {
void default_init(float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> mag(0.1f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) p[i] = sign(gen) ? mag(gen) : -mag(gen);
}
}  // namespace

std::vector<Tensor> generate_inputs(const Case& c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<Tensor> values;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor t = Tensor::zeros(c.inputs[i]);
    if (c.init)
      c.init(static_cast<int>(i), t.data<float>(), t.numel(), gen);
    else
      default_init(t.data<float>(), t.numel(), gen);
    values.push_back(std::move(t));
  }
  return values;
}

std::vector<Tensor> convert_inputs(const Case& c, const std::vector<Tensor>& values, DType under_test) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back(values[i].to(input_dtype(c, i, under_test)));
  return out;
}

Tensor host_f32(const Tensor& t) {
  Tensor h = t.on_host() ? t : t.to_device(Device::cpu());
  return h.dtype() == DType::f32 ? h.clone() : h.to(DType::f32);
}

namespace {
Tensor place(const Tensor& host, Device d) { return d.kind == DeviceKind::cpu ? host : host.to_device(d); }
}  // namespace

Instance::Instance(const Case& cs, Target t, const std::vector<Tensor>& inputs) : c(cs), target(t) {
  Attrs at = c.attrs;
  if (c.update) at.update = c.update.get();
  if (c.op == Op::Fill || c.op == Op::DropoutMask || c.cast_to_under_test) at.dtype = t.dtype;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bound.push_back(place(inputs[i], t.device()));
    in.push_back(g.variable("x" + std::to_string(i), bound.back()));
  }
  checked = c.build ? c.build(g, in, at) : std::vector<int>{g.add(c.op, in, at, "y")};
}

ExecContext Instance::context() const {
  ExecContext ctx;
  ctx.device = target.device();
  ctx.training = true;
  ctx.scalars.step = c.ctx_step;
  ctx.scalars.grad_scale = c.grad_scale;
  if (c.update) {  // the per-step hyperparameters, as the optimizer fills them in
    ctx.scalars.learning_rate = c.update->learning_rate;
    ctx.scalars.iterations = c.update->iterations;
  }
  return ctx;
}

std::vector<Tensor> Instance::run_forward() const {
  std::vector<int> outputs, sinks;
  for (int v : checked) (op_info(g[v].op).has_output ? outputs : sinks).push_back(v);
  Program p(g, outputs, sinks, target.device());
  p.run(context());
  std::vector<Tensor> out;
  for (int v : outputs) out.push_back(p.output(v));
  if (!sinks.empty())
    for (const Tensor& b : bound) out.push_back(b.on_host() ? b.clone() : b.to_device(Device::cpu()));
  return out;
}

std::vector<int> Instance::append_gradients(const Tensor& r) {
  const int y = checked.at(0);
  const Shape ys = g[y].shape;
  const int64_t n = ys.numel();
  if (r.shape() != ys || r.dtype() != g[y].dtype)
    throw InvalidArgument("append_gradients: r must have y's shape and dtype");
  keep_.push_back(place(r.reshape(Shape{n, 1}), target.device()));
  Attrs flat, scalar;
  flat.shape = Shape{1, n};
  scalar.shape = Shape{};
  const int rv = g.variable("r", keep_.back());
  const int s = g.add(Op::MatMul, {g.add(Op::Reshape, {y}, flat, "L/flat"), rv}, {}, "L/dot");
  const int loss = g.cast(g.add(Op::Reshape, {s}, scalar, "L/scalar"), DType::f32, "L/f32");
  std::vector<int> wrt;
  for (size_t i = 0; i < in.size(); ++i)
    if (i < c.differentiable.size() && c.differentiable[i]) wrt.push_back(in[i]);
  const std::vector<int> grads = gradients(g, {loss}, wrt);
  std::vector<int> dx(in.size(), -1);
  for (size_t i = 0, k = 0; i < in.size(); ++i)
    if (i < c.differentiable.size() && c.differentiable[i]) dx[i] = grads[k++];
  return dx;
}

std::unique_ptr<Program> Instance::program(const std::vector<int>& outputs) const {
  return std::make_unique<Program>(g, outputs, std::vector<int>{}, target.device());
}

std::optional<std::string> skip_reason(const Instance& inst) {
  // The case's own op declared missing: a skip, whatever else is missing (the coverage test checks every
  // op itself). Otherwise an undeclared missing kernel fails here too.
  std::optional<std::string> declared, undeclared;
  for (int id = 0; id < inst.g.size(); ++id) {
    const Node& n = inst.g[id];
    if (n.op == Op::Variable || n.op == Op::View) continue;  // a View runs no kernel (graph::Program skips it)
    const KernelSignature sig = signature_of(inst.g, id);
    if (has_kernel(inst.target.kind, n.op, sig)) continue;
    const std::string what =
        std::string(op_name(n.op)) + " " + sig.to_string() + " on " + inst.target.device().to_string();
    if (const char* why = declared_unsupported(inst.target.kind, n.op, inst.target.dtype)) {
      if (!declared || n.op == inst.c.op) declared = what + ": declared unsupported (" + why + ")";
      if (n.op == inst.c.op) return declared;
    } else if (!undeclared) {
      undeclared = what;
    }
  }
  if (undeclared) {
    ADD_FAILURE() << "no kernel for " << *undeclared
                  << ", and the unsupported list in tests/test_op_gradients.cpp does not declare it";
    return "missing kernel " + *undeclared;
  }
  return declared;
}

namespace {
std::string show(float v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}
}  // namespace

double expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  if (got.shape() != want.shape()) return INFINITY;
  const Tensor a = host_f32(got), b = host_f32(want);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t n = a.numel();
  double scale = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(pb[i])) scale = std::max(scale, std::abs(double(pb[i])));
  scale = std::max(scale, 1e-30);
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; ++i) {
    double e;
    if (!std::isfinite(pa[i]) || !std::isfinite(pb[i]))
      e = (std::isnan(pa[i]) && std::isnan(pb[i])) || pa[i] == pb[i] ? 0.0 : INFINITY;
    else
      e = std::abs(double(pa[i]) - double(pb[i])) / scale;
    if (e > worst || at < 0) worst = e, at = i;
  }
  if (n > 0)
    EXPECT_LE(worst, tol) << what << ": element " << at << " is " << show(pa[at]) << ", want " << show(pb[at])
                          << " (|error| / max|want| = " << worst << ", max|want| = " << scale << ", " << n
                          << " elements)";
  return worst;
}

void expect_exact(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  if (got.shape() != want.shape()) return;
  const Tensor g = got.on_host() ? got : got.to_device(Device::cpu());
  // The 16-bit expectation spelled out with the scalar conversions, as the contract states it.
  Tensor w(want.shape(), g.dtype());
  if (want.dtype() == DType::f32 && (g.dtype() == DType::f16 || g.dtype() == DType::bf16)) {
    const float* src = want.data<float>();
    for (int64_t i = 0; i < want.numel(); ++i) {
      const uint16_t bits =
          g.dtype() == DType::f16 ? float16::from_float(src[i]).bits : bfloat16::from_float(src[i]).bits;
      std::memcpy(static_cast<char*>(w.raw()) + 2 * i, &bits, 2);
    }
  } else {
    w = want.to(g.dtype());
  }
  const size_t es = dtype_size(g.dtype());
  const auto* pg = static_cast<const unsigned char*>(g.raw());
  const auto* pw = static_cast<const unsigned char*>(w.raw());
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::memcmp(pg + static_cast<size_t>(i) * es, pw + static_cast<size_t>(i) * es, es) != 0) {
      if (first < 0) first = i;
      ++mismatches;
    }
  if (mismatches == 0) return;
  const Tensor gf = host_f32(g), wf = host_f32(w);
  const Tensor rf = host_f32(want);
  ADD_FAILURE() << what << ": " << mismatches << " of " << g.numel() << " elements differ from the float32 result"
                << " converted to " << dtype_name(g.dtype()) << "; first at " << first << ": got "
                << show(gf.data<float>()[first]) << ", want " << show(wf.data<float>()[first]) << " (float32 result "
                << show(rf.data<float>()[first]) << ")";
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }
void PrintTo(const Target& t, std::ostream* os) { *os << t.name(); }

std::string param_name(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// ---------------------------------------------------------------- the comparisons compare
TEST(OpHarness, ExactComparisonSeesOneUlp) {
  Tensor want = Tensor::from_vector<float>({3}, {1.0f, 0.1f, -3.0f});
  Tensor got = want.to(DType::f16);
  expect_exact(got, want, "identical");
  static_cast<float16*>(got.raw())[1].bits ^= 1;
  EXPECT_NONFATAL_FAILURE(expect_exact(got, want, "one ulp off"), "1 of 3 elements differ");
}

TEST(OpHarness, CloseComparisonIsRelativeToTheMagnitudeAndStrictAboutNonFinite) {
  Tensor want = Tensor::from_vector<float>({3}, {100.0f, 1.0f, -2.0f});
  Tensor got = Tensor::from_vector<float>({3}, {100.0f, 1.5f, -2.0f});
  EXPECT_NEAR(expect_close(got, want, 1e-2, "within 0.5 of max 100"), 0.005, 1e-9);
  EXPECT_NONFATAL_FAILURE(expect_close(got, want, 1e-3, "too far"), "element 1 is 1.5, want 1");
  Tensor nan = Tensor::from_vector<float>({3}, {100.0f, NAN, -2.0f});
  EXPECT_NONFATAL_FAILURE(expect_close(nan, want, 1.0, "NaN"), "element 1");
}

TEST(OpHarness, TargetsIncludeEveryRegisteredBackendWithADeviceInEveryFloatDType) {
  const std::vector<Target> t = targets();
  ASSERT_FALSE(t.empty());
  EXPECT_TRUE(t[0].is_reference()) << "the cpu float32 reference comes first";
  for (int k = 0; k < kDeviceKindCount; ++k) {
    const auto kind = static_cast<DeviceKind>(k);
    const auto n = std::count_if(t.begin(), t.end(), [&](const Target& x) { return x.kind == kind; });
    EXPECT_EQ(n, has_backend(kind) && device_present(kind) ? 3 : 0) << Device{kind, 0}.to_string();
  }
}

// ---------------------------------------------------------------- the checks catch broken kernels
// A kernel swapped in for the length of a test (Program resolves kernels when it is built).
class KernelOverride {
 public:
  KernelOverride(Op op, const KernelSignature& sig, KernelFn fn) : op_(op), sig_(sig) {
    ensure_backends_registered();
    original_ = registered_kernel(DeviceKind::cpu, op, sig);
    register_kernel(DeviceKind::cpu, op, sig, fn);
  }
  ~KernelOverride() { register_kernel(DeviceKind::cpu, op_, sig_, original_); }
  KernelFn original() const { return original_; }

 private:
  Op op_;
  KernelSignature sig_;
  KernelFn original_ = nullptr;
};

// The failures `check` reports (intercepted: they do not fail this test), and the first one's message.
int failures_of(const std::function<void()>& check, std::string* first = nullptr) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    check();
  }
  if (first && results.size() > 0) *first = results.GetTestPartResult(0).message();
  return results.size();
}

KernelFn g_inner = nullptr;

TEST(OpHarness, ForwardCatchesA16BitKernelOneUlpOff) {
  const Case sigmoid = find_case("Sigmoid");
  const Target f16{DeviceKind::cpu, DType::f16};
  std::string skipped, message;
  ASSERT_EQ(failures_of([&] { check_forward(sigmoid, f16, &skipped); }), 0) << "the real kernel passes";
  KernelOverride broken(Op::Sigmoid, signature_for(Op::Sigmoid, DType::f16), [](const KernelArgs& a) {
    g_inner(a);
    static_cast<float16*>(a.out)[3].bits ^= 1;  // one element, one ulp
  });
  g_inner = broken.original();
  EXPECT_EQ(failures_of([&] { check_forward(sigmoid, f16, &skipped); }, &message), 1);
  EXPECT_TRUE(message.find("1 of 20 elements differ") != std::string::npos) << message;
  EXPECT_TRUE(skipped.empty());
}

TEST(OpHarness, GradientParityCatchesA16BitGradientKernelOffByAPercent) {
  const Case tanh = find_case("Tanh");
  const Target bf16{DeviceKind::cpu, DType::bf16};
  std::string skipped, message;
  ASSERT_EQ(failures_of([&] { check_gradient_parity(tanh, bf16, &skipped); }), 0) << "the real kernel passes";
  KernelOverride broken(Op::TanhGrad, signature_for(Op::TanhGrad, DType::bf16), [](const KernelArgs& a) {
    g_inner(a);
    auto* dx = static_cast<bfloat16*>(a.out);
    for (int64_t i = 0; i < a.node.shape.numel(); ++i) dx[i] = bfloat16::from_float(dx[i].to_float() * 1.1f);
  });
  g_inner = broken.original();
  EXPECT_GE(failures_of([&] { check_gradient_parity(tanh, bf16, &skipped); }, &message), 1);
  EXPECT_TRUE(message.find("Tanh on cpu_bfloat16: gradient 0") != std::string::npos) << message;
}

TEST(OpHarness, FiniteDifferencesCatchAWrongGradientRuleKernel) {
  const Case tanh = find_case("Tanh");
  std::string message;
  ASSERT_EQ(failures_of([&] { check_finite_differences(tanh); }), 0) << "the real kernel passes";
  KernelOverride broken(Op::TanhGrad, signature_for(Op::TanhGrad, DType::f32), [](const KernelArgs& a) {
    const float* dy = a.input<float>(0);
    const float* y = a.input<float>(1);
    for (int64_t i = 0; i < a.node.shape.numel(); ++i) a.output<float>()[i] = dy[i] * (1.0f - y[i]);  // not 1 - y^2
  });
  EXPECT_GE(failures_of([&] { check_finite_differences(tanh); }, &message), 1);
  EXPECT_TRUE(message.find("Tanh: d/dx0") != std::string::npos) << message;
}

// The NaN/Inf check compares with the rule, not with the cpu: the relu trainkit had until issue 35 (x > 0 ? x : 0,
// relu(NaN) = 0) fails it, on the cpu float32 reference itself.
TEST(OpHarness, NonFiniteCheckCatchesAReluThatMapsNaNToZero) {
  const auto cases = nonfinite_cases();
  const auto relu =
      std::find_if(cases.begin(), cases.end(), [](const NonFiniteCase& c) { return c.c.label == "Relu"; });
  ASSERT_NE(relu, cases.end());
  const Target cpu{DeviceKind::cpu, DType::f32};
  std::string skipped, message;
  ASSERT_EQ(failures_of([&] { check_nonfinite(*relu, cpu, &skipped); }), 0) << "the real kernel passes";
  KernelOverride hiding(Op::Relu, signature_for(Op::Relu, DType::f32), [](const KernelArgs& a) {
    const float* x = a.input<float>(0);
    for (int64_t i = 0; i < a.node.shape.numel(); ++i) a.output<float>()[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
  EXPECT_EQ(failures_of([&] { check_nonfinite(*relu, cpu, &skipped); }, &message), 1);
  EXPECT_TRUE(message.find("element 1 is 0, want nan") != std::string::npos) << message;
  EXPECT_TRUE(skipped.empty());
}

}  // namespace tk::graph::harness
