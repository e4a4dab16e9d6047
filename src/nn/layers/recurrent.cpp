// SimpleRNN, LSTM and GRU (Keras 3.15.1's cells, implementation 2), unrolled over the static time axis from the
// general ops; autodiff gives the gradient and the planner sees every step. The input projection x @ kernel (+ bias)
// of all steps is one GEMM over (T * N) rows, time-major so a step's slice is contiguous; each step then runs only
// h @ recurrent_kernel and the gates (keras/src/layers/rnn/{simple_rnn,lstm,gru}.py):
//   SimpleRNN  h = act(x W + b + h U)
//   LSTM       z = x W + b + h U;  i, f, c~, o = ract(z0), ract(z1), act(z2), ract(z3)
//              c = f * c + i * c~;  h = o * act(c)                                 (Keras: (x W + h U) + b)
//   GRU        reset_after (Keras 3's default): m = h U + b_rec; z, r = ract(x_z + m_z), ract(x_r + m_r)
//              hh = act(x_h + r * m_h);  h = z * h + (1 - z) * hh
//              reset_after=False: m = h U[:, :2u]; hh = act(x_h + (r * h) U[:, 2u:])
// h and c start at zero, or at the call's initial_state. dropout: one mask (N, features) drawn per batch and applied at
// every step, as Keras.
#include "nn/layers/recurrent.h"

#include <algorithm>

#include "graph/lstm_rules.h"
#include "graph/tensor_ops.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk::nn {
namespace {
using graph::Attrs;
using graph::BinaryFn;
using graph::Op;
namespace ops = graph::ops;

// Each kind's Keras class, default-name prefix and gate count G, in RecurrentSpec::Kind's order.
struct KindInfo {
  const char* class_name;
  const char* prefix;
  int64_t gates;
};
constexpr KindInfo kKinds[] = {{"SimpleRNN", "simple_rnn", 1}, {"LSTM", "lstm", 4}, {"GRU", "gru", 3}};
const KindInfo& info(RecurrentSpec::Kind k) { return kKinds[static_cast<size_t>(k)]; }

// Keras' LSTM with its default activations runs as one fused op over the whole sequence (graph/lstm_rules.h): no
// per-step ops for the executor to dispatch, the cell's element math in one pass per step, and dU one GEMM over all
// steps in the gradient. RecurrentLayer::run keeps the per-step composite for other activations, masks and a
// go_backwards sequence output in step order. Measured in docs/benchmarks.md (issue 32's bidirectional LSTM). Training
// programs only, for now: predict and evaluate programs are what Model::export_onnx writes, and LstmSequence has no
// ONNX mapping yet (the composite's ops all have one).
bool takes_fused_lstm(const RecurrentSpec& s, bool training, int mask, bool flip) {
  return training && s.kind == RecurrentSpec::Kind::lstm && s.activation == "tanh" &&
         s.recurrent_activation == "sigmoid" && mask < 0 && s.go_backwards == flip;
}
// proj (T * N, 4u) time-major -> the layer's output: (N, T, u) with return_sequences (time order), else (N, u).
int fused_lstm(graph::OpBuilder& b, const RecurrentSpec& s, int proj, int recurrent, int64_t n, int64_t steps,
               DType dtype) {
  const graph::LstmLayout layout{steps, n, s.units, s.go_backwards};
  Attrs at;
  at.reverse = s.go_backwards;
  const int h0 = b.g.fill(0.0f, Shape{n, s.units}, dtype), c0 = b.g.fill(0.0f, Shape{n, s.units}, dtype);
  const int y = b.add(Op::LstmSequence, {proj, recurrent, h0, c0}, at);  // (6T + 2, N, u)
  if (s.return_sequences)  // the h of times 0..T-1: T rows from out_row(0), (T, N, u) -> (N, T, u)
    return ops::transpose(b, ops::slice(b, y, 0, layout.out_row(0), steps), {1, 0, 2});
  return ops::reshape(b, ops::slice(b, y, 0, layout.last_row(), 1), Shape{n, s.units});  // (N, u)
}

}  // namespace

RecurrentLayer::RecurrentLayer(RecurrentSpec spec) : Layer(info(spec.kind).prefix, spec.name), spec_(std::move(spec)) {
  spec_.name = name;
  const std::string where = class_name() + " '" + name + "'";
  check_positive(*this, "units", spec_.units);
  check_activation(spec_.activation);
  if (spec_.kind != RecurrentSpec::Kind::simple_rnn) check_activation(spec_.recurrent_activation);
  check_initializer(spec_.kernel_initializer);
  check_initializer(spec_.recurrent_initializer);
  check_initializer(spec_.bias_initializer);
  check_rate(*this, "dropout", spec_.dropout);
  check_rate(*this, "recurrent_dropout", spec_.recurrent_dropout);
  if (spec_.stateful)
    throw Unsupported(where +
                      ": stateful=True is not supported (every batch starts from zero states); use "
                      "stateful=False");
  if (spec_.dropout > 0.0f && spec_.seed == 0) spec_.seed = next_seed();
}

int64_t RecurrentLayer::gates() const { return info(spec_.kind).gates; }
std::string RecurrentLayer::cell_name() const { return std::string(info(spec_.kind).prefix) + "_cell"; }
std::string RecurrentLayer::class_name() const { return info(spec_.kind).class_name; }

LayerConfig RecurrentLayer::get_config() const {
  // Keras' order: the RNN base's keys, then the cell's.
  LayerConfig c;
  c.set("return_sequences", spec_.return_sequences)
      .set("return_state", spec_.return_state)
      .set("go_backwards", spec_.go_backwards)
      .set("stateful", spec_.stateful)
      .set("unroll", spec_.unroll)
      .set("zero_output_for_mask", spec_.zero_output_for_mask)
      .set("units", spec_.units)
      .set("activation", spec_.activation);
  if (spec_.kind != RecurrentSpec::Kind::simple_rnn) c.set("recurrent_activation", spec_.recurrent_activation);
  c.set("use_bias", spec_.use_bias);
  if (spec_.kind == RecurrentSpec::Kind::lstm) c.set("unit_forget_bias", spec_.unit_forget_bias);
  c.set("kernel_initializer", spec_.kernel_initializer)
      .set("recurrent_initializer", spec_.recurrent_initializer)
      .set("bias_initializer", spec_.bias_initializer)
      .set_float("dropout", spec_.dropout)
      .set_float("recurrent_dropout", spec_.recurrent_dropout);
  if (spec_.kind == RecurrentSpec::Kind::gru) c.set("reset_after", spec_.reset_after);
  c.set("seed", static_cast<int64_t>(spec_.seed));
  return c;
}

Shape RecurrentLayer::output_shape(const Shape& x, const std::string& owner) const {
  if (x.rank() != 3 || !x.sample_shape().fully_known())
    throw InvalidArgument(owner + ": expects (batch, steps, features) with known steps and features, got " +
                          x.to_string() + " (an Embedding's output, or Reshape({steps, features}) first)");
  if (features_ > 0 && x[2] != features_)
    throw InvalidArgument(owner + " was built for " + std::to_string(features_) + " features per step, called on " +
                          x.to_string());
  return spec_.return_sequences ? Shape{-1, x[1], spec_.units} : Shape{-1, spec_.units};
}

void RecurrentLayer::create_weights(const AddWeight& add, int64_t features, const std::string& group) const {
  const int64_t u = spec_.units, gu = gates() * u;
  add("kernel", Shape{features, gu}, spec_.kernel_initializer).keras_vars = group;
  add("recurrent_kernel", Shape{u, gu}, spec_.recurrent_initializer).keras_vars = group;
  if (!spec_.use_bias) return;
  const bool two = spec_.kind == RecurrentSpec::Kind::gru && spec_.reset_after;
  Weight& bias = add("bias", two ? Shape{2, gu} : Shape{gu}, spec_.bias_initializer);
  bias.keras_vars = group;
  if (spec_.kind == RecurrentSpec::Kind::lstm && spec_.unit_forget_bias)  // Keras: [init(u), ones(u), init(2u)]
    std::fill(bias.value.data<float>() + u, bias.value.data<float>() + 2 * u, 1.0f);
}

void RecurrentLayer::check_states(const std::vector<Shape>& in, size_t first, size_t count,
                                  const std::string& owner) const {
  const Shape want{-1, spec_.units};
  for (size_t i = first; i < first + count; ++i)
    if (in[i] != want)
      throw InvalidArgument(owner + ": initial_state " + std::to_string(i - first) + " has shape " + in[i].to_string() +
                            ", expected " + want.to_string() + " (units " + std::to_string(spec_.units) + ")");
}

std::vector<Shape> RecurrentLayer::build_outputs(const std::vector<Shape>& in) {
  std::vector<Shape> out{build(in)};
  if (spec_.return_state) out.insert(out.end(), static_cast<size_t>(state_count()), Shape{-1, spec_.units});
  return out;
}

Shape RecurrentLayer::build(const std::vector<Shape>& in) {
  const std::string owner = class_name() + " '" + name + "'";
  const Shape out = output_shape(in[0], owner);
  if (in.size() != 1 && in.size() != 1 + static_cast<size_t>(state_count()))
    throw InvalidArgument(owner + ": takes a sequence and " + std::to_string(state_count()) +
                          " initial state(s) (initial_state), got " + std::to_string(in.size() - 1));
  check_states(in, 1, in.size() - 1, owner);
  if (!built_) {
    features_ = in[0][2];
    create_weights([this](const std::string& what, Shape s,
                          const std::string& init) -> Weight& { return add_weight(what, std::move(s), init); },
                   features_, "cell/vars");
  }
  return out;
}

int RecurrentLayer::call(CallContext& ctx, const std::vector<int>& in) const { return call_outputs(ctx, in)[0]; }

std::vector<int> RecurrentLayer::call_outputs(CallContext& ctx, const std::vector<int>& in) const {
  // Keras' backend.rnn: unroll=True gives masked steps the previous output whatever zero_output_for_mask says.
  std::vector<int> out(1), states;
  out[0] = run(ctx, in[0], weights_.data(), name, false, computing_mask(ctx, in),
               spec_.zero_output_for_mask && !spec_.unroll, std::vector<int>(in.begin() + 1, in.end()),
               spec_.return_state ? &states : nullptr);
  if (spec_.return_state) out.insert(out.end(), states.begin(), states.end());  // Keras: [output, h(, c)]
  return out;
}

int computing_mask(const CallContext& ctx, const std::vector<int>& inputs) {
  // Keras 3's Layer.__call__ fills in `mask` only for a call with one tensor argument: called with initial_state, the
  // layer computes unmasked (the output still carries the sequence's mask, from compute_mask).
  return inputs.size() > 1 ? -1 : ctx.input_mask(0);
}

int RecurrentLayer::compute_mask(CallContext& ctx, const std::vector<int>&, int) const {
  return spec_.return_sequences ? ctx.input_mask(0) : -1;  // Keras' RNN.compute_mask (states carry none)
}

int RecurrentLayer::run(CallContext& ctx, int x, const Weight* w, const std::string& owner, bool flip, int mask,
                        bool zero_output, const std::vector<int>& initial, std::vector<int>* final) const {
  graph::OpBuilder b{ctx.g, nullptr, owner};
  const Shape xs = ctx.g[x].shape;  // (N, T, D)
  const int64_t n = xs[0], steps = xs[1], d = xs[2], u = spec_.units, gu = gates() * u;
  const DType dtype = ctx.g[x].dtype;
  if (ctx.training && spec_.recurrent_dropout > 0.0f)
    throw Unsupported(class_name() + " '" + owner + "': recurrent_dropout > 0 is not supported in training (Keras' " +
                      "implementation 1 with per-gate masks); set recurrent_dropout=0");
  const std::string& act = spec_.activation;
  const std::string& ract = spec_.recurrent_activation;
  const int kernel = ctx.variable(w[0]);                      // (D, G*u)
  const int recurrent = ctx.variable(w[1]);                   // (u, G*u)
  const int bias = spec_.use_bias ? ctx.variable(w[2]) : -1;  // (G*u) or (2, G*u)
  const bool gru = spec_.kind == RecurrentSpec::Kind::gru, lstm = spec_.kind == RecurrentSpec::Kind::lstm;
  const bool two_biases = gru && spec_.reset_after && bias >= 0;

  int seq = x;
  if (ctx.training && spec_.dropout > 0.0f) {  // one mask per sample and feature, the same at every step
    Attrs at;
    at.rate = spec_.dropout;
    at.seed = spec_.seed;
    at.shape = Shape{n, 1, d};
    at.dtype = dtype;
    seq = ops::binary(b, BinaryFn::multiply, seq, ctx.g.add(Op::DropoutMask, {}, at, owner + "/dropout_mask"));
  }
  // All steps' input projections in one GEMM, time-major: (T * N, D) @ (D, G*u).
  const int rows = ops::reshape(b, ops::transpose(b, seq, {1, 0, 2}), Shape{steps * n, d});
  int proj = b.add(Op::MatMul, {rows, kernel});
  if (bias >= 0) {
    const int input_bias = two_biases ? ops::reshape(b, ops::slice(b, bias, 0, 0, 1), Shape{gu}) : bias;
    proj = b.add(Op::BiasAdd, {proj, input_bias});
  }
  // The fused op starts from zero states and gives the output alone: initial_state / return_state take the composite.
  if (initial.empty() && !final && takes_fused_lstm(spec_, ctx.training, mask, flip))
    return fused_lstm(b, spec_, proj, recurrent, n, steps, dtype);
  proj = ops::reshape(b, proj, Shape{steps, n, gu});  // (T, N, G*u)
  const int recurrent_bias = two_biases ? ops::reshape(b, ops::slice(b, bias, 0, 1, 1), Shape{gu}) : -1;
  // GRU reset_after=False: U's z and r columns multiply h, its h columns multiply r * h.
  const int u_zr = gru && !spec_.reset_after ? ops::slice(b, recurrent, 1, 0, 2 * u) : -1;
  const int u_h = gru && !spec_.reset_after ? ops::slice(b, recurrent, 1, 2 * u, u) : -1;

  auto gate = [&](int v, int64_t k) { return ops::slice(b, v, 1, k * u, u); };  // (N, u) of (N, G*u)
  auto add = [&](int a, int c) { return b.add(Op::Add, {a, c}); };
  auto mul = [&](int a, int c) { return b.add(Op::Mul, {a, c}); };
  auto matmul = [&](int a, int c) { return b.add(Op::MatMul, {a, c}); };
  auto activate = [&](const std::string& f, int v) { return apply_activation(ctx, f, v, owner); };

  int h = !initial.empty() ? initial[0] : ctx.g.fill(0.0f, Shape{n, u}, dtype);  // (N, u)
  int c = !lstm ? -1 : initial.size() > 1 ? initial[1] : ctx.g.fill(0.0f, Shape{n, u}, dtype);
  std::vector<int> outputs(spec_.return_sequences ? static_cast<size_t>(steps) : 0);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = spec_.go_backwards ? steps - 1 - s : s;
    const int xt = ops::reshape(b, ops::slice(b, proj, 0, t, 1), Shape{n, gu});  // (N, G*u)
    const int h_prev = h, c_prev = c;
    if (spec_.kind == RecurrentSpec::Kind::simple_rnn) {
      h = activate(act, add(xt, matmul(h, recurrent)));
    } else if (lstm) {
      const int z = add(xt, matmul(h, recurrent));
      const int i = activate(ract, gate(z, 0)), f = activate(ract, gate(z, 1));
      const int cc = activate(act, gate(z, 2)), o = activate(ract, gate(z, 3));
      c = add(mul(f, c), mul(i, cc));
      h = mul(o, activate(act, c));
    } else {
      int inner = matmul(h, spec_.reset_after ? recurrent : u_zr);  // (N, 3u) or (N, 2u)
      if (recurrent_bias >= 0) inner = b.add(Op::BiasAdd, {inner, recurrent_bias});
      const int z = activate(ract, add(gate(xt, 0), gate(inner, 0)));
      const int r = activate(ract, add(gate(xt, 1), gate(inner, 1)));
      const int rh = spec_.reset_after ? mul(r, gate(inner, 2)) : matmul(mul(r, h), u_h);
      const int hh = activate(act, add(gate(xt, 2), rh));
      Attrs one_minus;  // 1 - z
      one_minus.scale = -1.0f;
      one_minus.offset = 1.0f;
      h = add(mul(z, h), mul(b.add(Op::Scale, {z}, one_minus), hh));
    }
    int out = h;
    if (mask >= 0) {  // Keras: a masked step keeps the previous states (and output), or outputs zeros
      const int m = masks::condition(b, ops::reshape(b, ops::slice(b, mask, 1, t, 1), Shape{n, 1}));  // (N, 1)
      if (zero_output) out = ops::where(b, m, h, ops::scalar(b, 0.0f, h));
      h = ops::where(b, m, h, h_prev);
      if (lstm) c = ops::where(b, m, c, c_prev);
      if (!zero_output) out = h;
    }
    if (spec_.return_sequences)
      outputs[static_cast<size_t>(flip ? steps - 1 - s : s)] = ops::reshape(b, out, Shape{n, 1, u});
  }
  if (final) *final = lstm ? std::vector<int>{h, c} : std::vector<int>{h};  // the last unmasked step's
  return spec_.return_sequences ? ops::concat(b, outputs, 1) : h;           // (N, T, u) or (N, u)
}

}  // namespace tk::nn

namespace tk::layers {
namespace {
template <typename O>
nn::RecurrentSpec common(nn::RecurrentSpec::Kind kind, int64_t units, const O& o) {
  nn::RecurrentSpec s;
  s.kind = kind;
  s.units = units;
  s.activation = o.activation;
  s.use_bias = o.use_bias;
  s.kernel_initializer = o.kernel_initializer;
  s.recurrent_initializer = o.recurrent_initializer;
  s.bias_initializer = o.bias_initializer;
  s.dropout = o.dropout;
  s.recurrent_dropout = o.recurrent_dropout;
  s.seed = o.seed;
  s.return_sequences = o.return_sequences;
  s.return_state = o.return_state;
  s.go_backwards = o.go_backwards;
  s.stateful = o.stateful;
  s.unroll = o.unroll;
  s.name = o.name;
  s.dtype = o.dtype;
  return s;
}
LayerPtr make(nn::RecurrentSpec s) { return nn::make_with_dtype<nn::RecurrentLayer>(std::move(s)); }
}  // namespace

LayerPtr SimpleRNN(int64_t units, SimpleRNNOptions o) {
  return make(common(nn::RecurrentSpec::Kind::simple_rnn, units, o));
}
LayerPtr LSTM(int64_t units, LSTMOptions o) {
  nn::RecurrentSpec s = common(nn::RecurrentSpec::Kind::lstm, units, o);
  s.recurrent_activation = o.recurrent_activation;
  s.unit_forget_bias = o.unit_forget_bias;
  return make(std::move(s));
}
LayerPtr GRU(int64_t units, GRUOptions o) {
  nn::RecurrentSpec s = common(nn::RecurrentSpec::Kind::gru, units, o);
  s.recurrent_activation = o.recurrent_activation;
  s.reset_after = o.reset_after;
  return make(std::move(s));
}
}  // namespace tk::layers
