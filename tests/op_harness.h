// The op harness: every op, on every backend this build registers, in float32, float16 and bfloat16
// (in the spirit of ggml's test-backend-ops). Shared by
//   tests/test_op_gradients.cpp  the cases, the declared-unsupported list, coverage, gradient checks
//   tests/test_ops_forward.cpp   forward outputs against the cpu float32 result
//   tests/test_ops_cast.cpp      Cast between every pair of dtypes, round trips
//   tests/test_ops_errors.cpp    missing kernels, dtype and shape errors, dropout determinism
//   tests/test_ops_nonfinite.cpp NaN and Inf inputs against TensorFlow's rule (nonfinite_cases())
//
// A case's leaves are Variables bound to tensors the test owns (program inputs are written only by
// nn::BatchStager), so a test changes an input between runs by writing the tensor.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/backend.h"
#include "graph/program.h"

namespace tk::graph::harness {

inline constexpr std::array<DType, 3> kFloatDTypes = {DType::f32, DType::f16, DType::bf16};

// Fills input i (n values, as float32 before they are rounded to the input's dtype).
using InitFn = std::function<void(int input, float* values, int64_t n, std::mt19937& gen)>;
// Emits the case's ops over its inputs; returns the values to check (the first one is differentiated).
using BuildFn = std::function<std::vector<int>(Graph& g, const std::vector<int>& in, const Attrs& attrs)>;

struct Case {
  std::string label;
  Op op;  // the op the case proves (what the coverage tests count)
  std::vector<Shape> inputs;
  std::vector<bool> differentiable = {};  // per input; a case with none is forward-only
  Attrs attrs = {};
  InitFn init = nullptr;  // default: uniform magnitudes in [0.1, 2], random sign (away from kinks at 0)
  // Per input: a fixed dtype (int32 labels, a float32 loss dy, a float16 Cast source); nullopt or a
  // missing entry means "the dtype under test".
  std::vector<std::optional<DType>> dtypes = {};
  float fd_step = 1e-2f;    // relative finite-difference step; ops linear in each input can take a larger one
  BuildFn build = nullptr;  // default: one node of `op` over the inputs
  // A composite whose intermediate values (BnStats) are rounded to the dtype under test, so a 16-bit run is
  // not exactly the float32 run rounded once: compared within the tolerance even on the cpu.
  bool rounds_intermediates = false;
  bool cast_to_under_test = false;  // Cast, OneHot: attrs.dtype becomes the dtype under test
  bool extra_signature = false;     // runs a signature beside signature_for's (int64 indices): no usual-signature check
  std::shared_ptr<UpdateConfig> update = nullptr;  // update ops: becomes attrs.update
  uint64_t ctx_step = 0;                           // StepScalars::step (dropout)
  float grad_scale = 1.0f;                         // StepScalars::grad_scale (AccumulateGrad)
};

// Cases for every differentiable op (finite differences in float32; 16-bit and other backends against the
// cpu float32 gradient), and those plus cases for every other op (forward outputs).
std::vector<Case> gradient_cases();
std::vector<Case> forward_cases();
// The general tensor ops' cases (tests/test_tensor_op_cases.cpp), part of the two lists above.
std::vector<Case> tensor_gradient_cases();
std::vector<Case> tensor_forward_cases();
// The fused LSTM ops' cases (tests/test_lstm_op_cases.cpp), part of the two lists above.
std::vector<Case> lstm_gradient_cases();
std::vector<Case> lstm_forward_cases();  // the forward-only ones (the gradient cases run forward too)
// The fused attention ops' cases (tests/test_attention_op_cases.cpp), part of the two lists above.
std::vector<Case> attention_gradient_cases();
std::vector<Case> attention_forward_cases();  // the forward-only ones
// An op on inputs holding NaN, +Inf and -Inf (c.init places them), and `rule`: its expected outputs (host float32)
// from the float32 values of the inputs, written out from TensorFlow's semantics (tests/test_ops_nonfinite.cpp says
// the rule per family). Compared with expect_close: every non-finite element must match exactly.
using RuleFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
struct NonFiniteCase {
  Case c;
  RuleFn rule;
  // Convolutions: tiled kernels (oneDNN's AMX bfloat16 convolutions, cuDNN's Winograd and FFT algorithms) multiply
  // inputs next to a window by zero weights, and 0 * Inf is NaN: in a block of this many output elements (an image)
  // that the rule gives a non-finite value, a value the rule gives finite may come out NaN or Inf, and an Inf NaN.
  // A NaN the rule gives must still be NaN (never hidden). 0: no spread allowed.
  int64_t spread_block = 0;
};
std::vector<NonFiniteCase> nonfinite_cases();
std::vector<NonFiniteCase> tensor_nonfinite_cases();     // the general ops' (tests/test_tensor_op_cases.cpp)
std::vector<NonFiniteCase> lstm_nonfinite_cases();       // the fused LSTM ops' (tests/test_lstm_op_cases.cpp)
std::vector<NonFiniteCase> attention_nonfinite_cases();  // the fused attention ops' (test_attention_op_cases.cpp)
void PrintTo(const NonFiniteCase& c, std::ostream* os);

// The reason `device` has no kernel for (op, dtype), from the declared list in test_op_gradients.cpp, or
// nullptr when it must have one.
const char* declared_unsupported(DeviceKind device, Op op, DType dtype);

struct Target {
  DeviceKind kind = DeviceKind::cpu;
  DType dtype = DType::f32;
  Device device() const { return Device{kind, 0}; }
  bool is_reference() const { return kind == DeviceKind::cpu && dtype == DType::f32; }
  std::string name() const;  // "cpu_float16"
};

// Every backend compiled into this build (graph::has_backend), so a new one is picked up without a change here
// (the kernel-coverage test checks each one's kernel table, with or without its device).
std::vector<DeviceKind> backend_kinds();
// Whether this machine has device 0 of `kind` (the cpu always; cuda:0 when the CUDA runtime finds a GPU).
bool device_present(DeviceKind kind);
// The compiled backends whose device exists here: the ones the checks run on. Without a GPU the CUDA targets are
// not listed at all (tools/gpu_check.sh runs them on a GPU machine), rather than hundreds of skipped tests.
std::vector<DeviceKind> runnable_kinds();
// Every (runnable backend, dtype in kFloatDTypes).
std::vector<Target> targets();

// Tolerances, as the largest |got - want| over a tensor divided by the largest |want| (the tensor's
// magnitude), per dtype; the reasoning and the measured errors are at its definition.
struct Tolerance {
  double forward;   // one op (or a composite with rounded intermediates) on identical inputs
  double gradient;  // forward + gradient program: every intermediate value is rounded to the dtype
};
Tolerance tolerance(DType t);

// 16-bit results that must equal the float32 result rounded to 16 bits, bit for bit, on every backend:
// elementwise ops, data movement and activations (and their gradients), whose float32 result a 16-bit
// kernel has no reason to round differently. (On the cpu every single-op 16-bit result is exact: widen.cpp
// runs the float32 kernel on the widened inputs and rounds once.)
constexpr bool is_exact_op(Op op) {
  switch (op) {
    case Op::Fill:
    case Op::Cast:
    case Op::Add:
    case Op::Mul:
    case Op::Scale:
    case Op::Reshape:
    case Op::Concat:
    case Op::Slice:
    case Op::Relu:
    case Op::ReluGrad:
    case Op::Sigmoid:
    case Op::SigmoidGrad:
    case Op::Tanh:
    case Op::TanhGrad:
    case Op::Gelu:
    case Op::GeluGrad:
    case Op::Elu:
    case Op::EluGrad:
    case Op::LeakyRelu:
    case Op::LeakyReluGrad:
    case Op::Softmax:
    case Op::SoftmaxGrad:
    case Op::Pad2D:
    case Op::Crop2D:
    case Op::Unary:
    case Op::UnaryGrad:
    case Op::Binary:
    case Op::Compare:
    case Op::Where:
    case Op::BroadcastTo:
    case Op::Transpose:
    case Op::Reverse:
    case Op::Pad:
    case Op::Gather:
    case Op::GatherGrad:
    case Op::OneHot:
    case Op::ArgReduce:
    case Op::StepValue:
    case Op::Assign:
      return true;
    default:
      return false;
  }
}

// Of the exact ops, those whose result another backend may round differently from the cpu by an ulp: the
// activations that call exp/tanh/erf (glibc on the cpu, CUDA's device library there: each within 2 ulp, not always
// the same bits) and the softmax pair (a row's sum in another order). Bit-exact on the cpu; on another backend they
// are compared within the dtype's tolerance instead.
constexpr bool exact_on_the_cpu_only(Op op) {
  switch (op) {
    case Op::Sigmoid:
    case Op::SigmoidGrad:
    case Op::Tanh:
    case Op::TanhGrad:
    case Op::Gelu:
    case Op::GeluGrad:
    case Op::Elu:
    case Op::EluGrad:
    case Op::Softmax:
    case Op::SoftmaxGrad:
    case Op::Unary:  // transcendental functions
    case Op::UnaryGrad:
    case Op::Binary:  // power
      return true;
    default:
      return false;
  }
}

DType input_dtype(const Case& c, size_t input, DType under_test);
// The case's input values as float32 host tensors (deterministic for a seed).
std::vector<Tensor> generate_inputs(const Case& c, uint32_t seed);
// Each input converted to the dtype it has when the case runs in `under_test` (Tensor::to: round to nearest
// even). Converting the 16-bit inputs back with under_test = f32 gives the float32 reference's inputs.
std::vector<Tensor> convert_inputs(const Case& c, const std::vector<Tensor>& values, DType under_test);
// A host copy in float32 (from any device and any dtype).
Tensor host_f32(const Tensor& t);

// One case built for one target, its inputs bound as Variables (on the cpu, to the very host tensors given,
// so writing them changes what the next run reads; elsewhere to device copies).
class Instance {
 public:
  Instance(const Case& c, Target target, const std::vector<Tensor>& inputs);

  ExecContext context() const;

  // Runs the case once; host copies of the checked values, then (ops without output, which update their
  // operands in place) of every input after the run.
  std::vector<Tensor> run_forward() const;

  // Appends L = sum(y * r) for y = checked[0] (computed as reshape(y, (1, n)) x r, cast to float32) and
  // graph::gradients(L) with respect to the differentiable inputs; `r` is a host tensor of y's shape and
  // dtype. Returns each input's gradient value (-1 where none is asked for or none exists).
  std::vector<int> append_gradients(const Tensor& r);
  // A program on the target computing `outputs` (Unsupported if a kernel is missing: see skip_reason()).
  std::unique_ptr<Program> program(const std::vector<int>& outputs) const;

  const Case& c;
  Target target;
  std::vector<Tensor> bound;  // what the Variables point at
  Graph g;
  std::vector<int> in, checked;

 private:
  std::vector<Tensor> keep_;  // further bound tensors (r)
};

// EXPECTs that `got` (any dtype, any device) is within tol of `want` (host float32) relative to the
// largest |want|; non-finite values must match exactly (NaN with NaN, Inf with the same Inf). Returns the
// normalized error.
double expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what);
// EXPECTs that `got` holds exactly the bytes of `want` converted to got's dtype (tk::float16::from_float /
// bfloat16::from_float for 16-bit targets; NaNs compare by bits too).
void expect_exact(const Tensor& got, const Tensor& want, const std::string& what);

// Why a check of `inst` is skipped: nullopt when every kernel its graph needs exists; else the reason the
// unsupported list gives (for the case's own op, if it is among the missing). A missing kernel the list
// does not declare is also a failure.
std::optional<std::string> skip_reason(const Instance& inst);

// The checks, one case on one target (the parameterized tests call them; the harness's self-tests call them
// with a deliberately broken kernel). A check that cannot run (a declared missing kernel) sets *skipped.
// Forward: outputs against the cpu float32 run on the same (rounded) inputs. `reference` (default: c itself) is the
// case the cpu runs: a variant of an op (synchronized BatchNormalization over one replica) against the plain one.
void check_forward(const Case& c, Target target, std::string* skipped, const Case* reference = nullptr);
// Gradients in float32 on the cpu against central differences of L = sum(y * r).
void check_finite_differences(const Case& c);
// The gradient program on the target against the cpu float32 one, on the same (rounded) inputs and r.
void check_gradient_parity(const Case& c, Target target, std::string* skipped, const Case* reference = nullptr);
// One NaN/Inf case on one target (a check that cannot run, a declared missing kernel, sets *skipped).
void check_nonfinite(const NonFiniteCase& c, Target target, std::string* skipped);
// The case labelled so in forward_cases() (which includes gradient_cases()).
Case find_case(const std::string& label);

// gtest's printing of parameters (instead of their bytes).
void PrintTo(const Case& c, std::ostream* os);
void PrintTo(const Target& t, std::ostream* os);

// gtest parameter names: alphanumerics and '_' only.
std::string param_name(std::string s);

}  // namespace tk::graph::harness
