// Model::export_onnx: the inference program, op by op, as an ONNX ModelProto (IR 8, opset 17).
//
// The exported graph is the one trainkit runs for predict (traced at a batch of kTraceBatch, then the batch
// axis made symbolic), so whatever layers produced it, each graph op maps to ONNX ops. Tensors stay
// channels_last (NHWC) as in trainkit and Keras: convolutions and pooling, which ONNX defines on NCHW, are
// wrapped in Transposes, so a Flatten after convolutions flattens (H, W, C) in trainkit's order and the Dense
// kernel that follows needs no row permutation. The general tensor ops (graph/op.h from Unary on) map to their ONNX
// namesakes where opset 17 has one with the same math, else to a few ONNX ops (expm1 as Exp - 1, gelu as
// x * (1 + erf(x / sqrt 2)) / 2, ...); shapes that hold the batch (a BroadcastTo or Fill to (batch, ...)) take it
// from the first input at run time, so the batch axis stays symbolic.
#include "io/onnx_export.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backends/math/unary.h"
#include "graph/schedule.h"
#include "io/onnx_file.h"
#include "io/proto_writer.h"
#include "nn/compiler/programs.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

using io::proto::Message;
constexpr int64_t kTraceBatch = 7;  // a batch no layer dimension is likely to equal: Reshapes tell it apart
constexpr int64_t kIrVersion = 8, kOpset = 17;
constexpr int64_t kFloat = 1, kUint8 = 2, kInt32 = 6, kInt64 = 7, kBool = 9;  // TensorProto.DataType

// The ONNX element type of a trainkit dtype; 0 for the 16-bit floats, which the exporter does not write.
int64_t onnx_type(DType t) {
  switch (t) {
    case DType::f32:
      return kFloat;
    case DType::u8:
      return kUint8;
    case DType::i32:
      return kInt32;
    case DType::i64:
      return kInt64;
    case DType::boolean:
      return kBool;
    default:
      return 0;
  }
}

// AttributeProto{name 1, f 2, i 3, ints 8, type 20}; types FLOAT 1, INT 2, INTS 7.
Message attr_int(const char* name, int64_t v) { return Message().str(1, name).i64(3, v).varint(20, 2); }
Message attr_float(const char* name, float v) { return Message().str(1, name).f32(2, v).varint(20, 1); }
Message attr_ints(const char* name, const std::vector<int64_t>& v) {
  Message m;
  m.str(1, name);
  for (int64_t x : v) m.i64(8, x);  // proto2 repeated int64: unpacked, as onnx's own serializer writes it
  return m.varint(20, 7);
}

// ValueInfoProto{name 1, type 2: TypeProto{tensor_type 1: {elem_type 1, shape 2: {dim 1: {dim_value 1 |
// dim_param 2}}}}}, the first axis named "batch".
Message value_info(const std::string& name, const Shape& shape, int64_t elem_type = kFloat) {
  Message dims;
  for (int i = 0; i < shape.rank(); ++i) {
    Message d;
    if (i == 0)
      d.str(2, "batch");
    else
      d.i64(1, shape[i]);
    dims.msg(1, d);
  }
  Message tensor;
  tensor.i64(1, elem_type).msg(2, dims);
  return Message().str(1, name).msg(2, Message().msg(1, tensor));
}

// The graph as it is built: nodes and small constants encoded, weights by reference (their bytes are written from
// their own memory when the file is: io/onnx_file.h).
class OnnxGraph {
 public:
  // TensorProto{dims 1, data_type 2, name 8, raw_data 9}
  std::string constant_f32(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    io::onnx::Initializer& t = add_initializer(name, dims, kFloat);
    t.raw.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return name;
  }
  // A float32 weight as it is, or (to_fckk) a convolution kernel (KH, KW, C, F) as ONNX's (F, C, KH, KW).
  std::string weight(const std::string& name, const std::string& variable, const Tensor& value, bool to_fckk) {
    std::vector<int64_t> dims = value.shape().dims();
    if (to_fckk) dims = {dims[3], dims[2], dims[0], dims[1]};
    io::onnx::Initializer& t = add_initializer(name, dims, kFloat);
    t.weight = &value;
    t.weight_name = variable;
    t.to_fckk = to_fckk;
    return name;
  }
  std::string constant_i64(const std::string& name, const std::vector<int64_t>& v) {
    std::string& raw = add_initializer(name, {static_cast<int64_t>(v.size())}, kInt64).raw;
    for (int64_t x : v)
      for (int i = 0; i < 8; ++i) raw.push_back(static_cast<char>(static_cast<uint64_t>(x) >> (8 * i)));
    return name;
  }
  // Any exported dtype: v[i] converted to it (bool as 0/1 bytes).
  std::string constant(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                       const std::vector<double>& v) {
    std::string& raw = add_initializer(name, dims, onnx_type(dtype)).raw;
    auto put = [&raw](const auto x) {
      char b[sizeof(x)];
      std::memcpy(b, &x, sizeof(x));  // little-endian hosts, as raw_data is
      raw.append(b, sizeof(x));
    };
    for (double x : v) {
      if (dtype == DType::f32)
        put(static_cast<float>(x));
      else if (dtype == DType::i32)
        put(static_cast<int32_t>(x));
      else if (dtype == DType::i64)
        put(static_cast<int64_t>(x));
      else if (dtype == DType::boolean)
        put(static_cast<uint8_t>(x != 0.0));
      else
        put(static_cast<uint8_t>(x));
    }
    return name;
  }
  // NodeProto{input 1, output 2, name 3, op_type 4, attribute 5}
  std::string node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output,
                   const std::vector<Message>& attrs = {}) {
    Message& n = parts_.nodes.emplace_back();
    for (const std::string& in : inputs) n.str(1, in);
    n.str(2, output).str(3, output).str(4, op);
    for (const Message& a : attrs) n.msg(5, a);
    return output;
  }
  std::string unique(const std::string& base) {
    std::string name = base;
    for (int i = 1; !names_.insert(name).second; ++i) name = base + "_" + std::to_string(i);
    return name;
  }
  // The model's parts so far (io::onnx::write_model writes them), its inputs and outputs to be added.
  io::onnx::ModelParts& parts() { return parts_; }

 private:
  // TensorProto fields dims 1, data_type 2 and name 8; raw_data 9 is the caller's.
  io::onnx::Initializer& add_initializer(const std::string& name, const std::vector<int64_t>& dims, int64_t type) {
    io::onnx::Initializer& t = parts_.initializers.emplace_back();
    for (int64_t d : dims) t.head.i64(1, d);
    t.head.i64(2, type).str(8, name);
    return t;
  }
  io::onnx::ModelParts parts_;
  std::set<std::string> names_;
};

std::vector<float> host_floats(const Tensor& t) {
  const Tensor host = t.on_host() ? t : t.to_device(Device::cpu());
  const Tensor f = host.dtype() == DType::f32 ? host : host.to(DType::f32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

const char* supported_ops() {
  return "MatMul, BiasAdd, Add, Mul, Scale, Reshape, Concat, Slice, Relu, Sigmoid, Tanh, Gelu, Elu, LeakyRelu, "
         "Softmax, LogSoftmax, LayerNormApply (with its LayerNormStats), Conv2D, MaxPool2D, AvgPool2D, Pad2D, "
         "BnInference, Cast (not to 16-bit floats), Fill, Unary (every function), Binary, Compare, Where, Reduce, "
         "ArgReduce, BroadcastTo, Transpose, Pad, BatchMatMul, Gather, OneHot";
}

}  // namespace

}  // namespace tk

namespace tk::io {

void export_onnx(Model& model, const std::string& path) {
  model.ensure_built({});
  const nn::ProgramCache::Traced t =
      model.trainer().programs().trace(nn::ProgramKind::predict, kTraceBatch, false, false, nullptr, /*fuse=*/false);
  const graph::Graph& g = t.g;
  const nn::Compiled& c = *t.compiled;

  std::map<std::string, const Weight*> weights;
  for (const LayerPtr& l : model.layers())
    for (const Weight& w : l->weights()) weights.emplace(w.name, &w);

  OnnxGraph onnx;
  std::vector<std::string> name(static_cast<size_t>(g.size()));  // ONNX value name per graph node
  std::vector<Message> inputs, outputs;
  auto fail = [&](int id, const std::string& why) {
    throw Unsupported("export_onnx: " + why + " (node '" + g[id].name + "', op " +
                      std::string(graph::op_info(g[id].op).name) + "); the exporter covers " + supported_ops());
  };
  auto nhwc_to_nchw = [&](const std::string& x) {
    return onnx.node("Transpose", {x}, onnx.unique(x + "_nchw"), {attr_ints("perm", {0, 3, 1, 2})});
  };
  auto nchw_to_nhwc = [&](const std::string& x, const std::string& out) {
    return onnx.node("Transpose", {x}, out, {attr_ints("perm", {0, 2, 3, 1})});
  };
  auto scalar = [&](const std::string& base, float v) { return onnx.constant_f32(onnx.unique(base), {}, {v}); };
  auto i64s = [&](const std::string& base, const std::vector<int64_t>& v) {
    return onnx.constant_i64(onnx.unique(base), v);
  };
  std::vector<char> batched(static_cast<size_t>(g.size()), 0);  // the value's first axis is the batch
  std::string first_input, batch_dim;  // the model's first input; (1) int64, its batch size at run time
  // A shape as an ONNX int64 tensor: a constant, or (batch) with the first axis read from the first input at run time.
  auto shape_tensor = [&](int id, const std::string& base, const std::vector<int64_t>& dims, bool batch) {
    if (!batch) return i64s(base, dims);
    if (first_input.empty()) fail(id, "a batch-sized shape in a model without inputs");
    if (batch_dim.empty())
      batch_dim =
          onnx.node("Shape", {first_input}, onnx.unique("batch_size"), {attr_int("start", 0), attr_int("end", 1)});
    if (dims.size() == 1) return batch_dim;
    const std::string rest = i64s(base + "_rest", std::vector<int64_t>(dims.begin() + 1, dims.end()));
    return onnx.node("Concat", {batch_dim, rest}, onnx.unique(base), {attr_int("axis", 0)});
  };
  // Keras' exact gelu, x * Phi(x) = x * (1 + erf(x / sqrt 2)) / 2: opset 17 has no Gelu op.
  auto gelu_exact = [&](const std::string& x, const std::string& out) {
    std::string v = onnx.node("Div", {x, scalar(out + "_sqrt2", std::sqrt(2.0f))}, onnx.unique(out + "_div"));
    v = onnx.node("Erf", {v}, onnx.unique(out + "_erf"));
    v = onnx.node("Add", {v, scalar(out + "_one", 1.0f)}, onnx.unique(out + "_add"));
    v = onnx.node("Mul", {x, v}, onnx.unique(out + "_mul"));
    onnx.node("Mul", {v, scalar(out + "_half", 0.5f)}, out);
  };

  // Weights become initializers when an exported op reads them as they are (a convolution's kernel is
  // written transposed instead).
  auto variable = [&](int id) -> const std::string& {
    std::string& s = name[static_cast<size_t>(id)];
    if (!s.empty()) return s;
    auto w = weights.find(g[id].name);
    if (w == weights.end()) fail(id, "a variable that is no layer's weight");
    if (g[id].dtype != DType::f32 || w->second->value.dtype() != DType::f32) fail(id, "a variable that is not float32");
    s = onnx.weight(onnx.unique(g[id].name), g[id].name, w->second->value, false);
    return s;
  };
  for (size_t k = 0; k < c.x.size(); ++k) {  // the model's inputs, in order
    const int id = c.x[k];
    const std::string in = onnx.unique(g[id].name);
    if (!onnx_type(g[id].dtype)) fail(id, "a 16-bit float input (the exporter writes float32 computations)");
    inputs.push_back(value_info(in, g[id].shape, onnx_type(g[id].dtype)));
    if (k == 0) first_input = in;
    batched[static_cast<size_t>(id)] = 1;
    std::string v = in;
    const nn::StageScale s = c.x_scale[k];  // a Rescaling fused into batch staging: explicit here
    if (s.scale != 1.0f) v = onnx.node("Mul", {v, scalar(in + "_scale", s.scale)}, onnx.unique(in + "_scaled"));
    if (s.offset != 0.0f) v = onnx.node("Add", {v, scalar(in + "_offset", s.offset)}, onnx.unique(in + "_shifted"));
    name[static_cast<size_t>(id)] = v;
  }
  // Only what the predictions need, in an executable order.
  for (int id : graph::schedule(g, c.outputs)) {
    const graph::Node& n = g[id];
    if (n.op == graph::Op::Variable) continue;
    if (n.op != graph::Op::Input && !onnx_type(n.dtype))
      fail(id, "a 16-bit float value (the exporter writes float32 computations)");
    const std::string out = onnx.unique(n.name.empty() ? "v" + std::to_string(id) : n.name);
    for (int src : n.inputs) batched[static_cast<size_t>(id)] |= batched[static_cast<size_t>(src)];
    auto tmp = [&](const char* suffix) { return onnx.unique(out + suffix); };
    auto rank_of = [&](size_t i) { return g[n.inputs[i]].shape.rank(); };
    auto in = [&](size_t i) -> const std::string& {
      const int src = n.inputs[i];
      if (g[src].op == graph::Op::Variable) return variable(src);
      const std::string& s = name[static_cast<size_t>(src)];
      if (s.empty()) fail(id, "an input of this node was not exported");
      return s;
    };
    auto all_in = [&] {  // every input, in order
      std::vector<std::string> ins;
      for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(in(i));
      return ins;
    };
    switch (n.op) {
      case graph::Op::Input:
        continue;  // the model's inputs are named above; targets are not part of inference
      case graph::Op::MatMul:
      case graph::Op::BatchMatMul: {
        auto swap_last = [&](size_t i, const std::string& x) {  // a transposed operand: its last two axes swapped
          std::vector<int64_t> perm(static_cast<size_t>(rank_of(i)));
          std::iota(perm.begin(), perm.end(), int64_t{0});
          std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
          return onnx.node("Transpose", {x}, onnx.unique(x + "_t"), {attr_ints("perm", perm)});
        };
        std::string a = in(0), b = in(1);
        if (n.attrs.trans_a) a = swap_last(0, a);
        if (n.attrs.trans_b) b = swap_last(1, b);
        onnx.node("MatMul", {a, b}, out);
        break;
      }
      case graph::Op::BiasAdd:
      case graph::Op::Add:
        if (n.inputs.size() != 2) fail(id, "an Add of more than two values");
        onnx.node("Add", {in(0), in(1)}, out);
        break;
      case graph::Op::Mul:
      case graph::Op::Relu:
      case graph::Op::Sigmoid:
      case graph::Op::Tanh:
      case graph::Op::Where:  // ONNX's namesakes
        onnx.node(std::string(graph::op_info(n.op).name), all_in(), out);
        break;
      case graph::Op::Scale: {
        std::string v = onnx.node("Mul", {in(0), scalar(out + "_scale", n.attrs.scale)}, onnx.unique(out + "_mul"));
        onnx.node("Add", {v, scalar(out + "_offset", n.attrs.offset)}, out);
        break;
      }
      case graph::Op::Reshape: {
        std::vector<int64_t> dims = n.attrs.shape.dims();
        if (batched[static_cast<size_t>(id)]) {  // the batch first (a weight's or a constant's shape stays as it is)
          if (dims.empty()) fail(id, "a reshape to a scalar");
          if (dims[0] == kTraceBatch && g[n.inputs[0]].shape[0] == kTraceBatch)
            dims[0] = 0;  // ONNX: copy the (dynamic) batch dimension from the input
          else if (dims[0] % kTraceBatch == 0)
            dims[0] = -1;  // the batch merged with other axes, or split back out of them (Dense on rank 3): inferred
          else
            fail(id, "a reshape whose first axis is not the batch");
        }
        onnx.node("Reshape", {in(0), onnx.constant_i64(onnx.unique(out + "_shape"), dims)}, out);
        break;
      }
      case graph::Op::Concat:
      case graph::Op::Gather:  // ONNX's namesakes, with the axis
        onnx.node(std::string(graph::op_info(n.op).name), all_in(), out, {attr_int("axis", n.attrs.axis)});
        break;
      case graph::Op::Slice: {  // Slice-13: starts, ends, axes as inputs
        const int a = n.attrs.axis < 0 ? n.attrs.axis + rank_of(0) : n.attrs.axis;
        if (a == 0 && batched[static_cast<size_t>(n.inputs[0])]) fail(id, "a slice of the batch axis");
        onnx.node("Slice",
                  {in(0), i64s(out + "_starts", {n.attrs.begin}), i64s(out + "_ends", {n.attrs.begin + n.attrs.size}),
                   i64s(out + "_axes", {a})},
                  out);
        break;
      }
      case graph::Op::Softmax:
      case graph::Op::LogSoftmax:
        onnx.node(n.op == graph::Op::Softmax ? "Softmax" : "LogSoftmax", {in(0)}, out, {attr_int("axis", -1)});
        break;
      case graph::Op::Elu:
      case graph::Op::LeakyRelu:
        onnx.node(n.op == graph::Op::Elu ? "Elu" : "LeakyRelu", {in(0)}, out, {attr_float("alpha", n.attrs.alpha)});
        break;
      case graph::Op::Gelu:
        gelu_exact(in(0), out);
        break;
      case graph::Op::Cast: {
        const DType from = g[n.inputs[0]].dtype;
        if (!onnx_type(from)) fail(id, "a cast from a 16-bit float");
        if (from == n.attrs.dtype)
          onnx.node("Identity", {in(0)}, out);
        else
          onnx.node("Cast", {in(0)}, out, {attr_int("to", onnx_type(n.attrs.dtype))});
        break;
      }
      case graph::Op::Fill: {  // the value in the node's dtype, expanded to its shape (the batch's at run time)
        const std::vector<int64_t> dims = n.attrs.shape.dims();
        const bool batch = !dims.empty() && dims[0] == kTraceBatch;
        if (!batch && n.attrs.shape.numel() == 1) {
          onnx.constant(out, n.dtype, dims, {n.attrs.value});
        } else {
          const std::string v = onnx.constant(tmp("_value"), n.dtype, {}, {n.attrs.value});
          onnx.node("Expand", {v, shape_tensor(id, out + "_shape", dims, batch)}, out);
        }
        batched[static_cast<size_t>(id)] = batch;
        break;
      }
      case graph::Op::Unary: {
        using graph::UnaryFn;
        // The functions opset 17 has under their own name, with the same math (HardSwish: alpha 1/6, beta 1/2).
        static const std::map<UnaryFn, const char*> kNamesakes = {{UnaryFn::exp, "Exp"},
                                                                  {UnaryFn::log, "Log"},
                                                                  {UnaryFn::sqrt, "Sqrt"},
                                                                  {UnaryFn::abs, "Abs"},
                                                                  {UnaryFn::negative, "Neg"},
                                                                  {UnaryFn::sign, "Sign"},
                                                                  {UnaryFn::reciprocal, "Reciprocal"},
                                                                  {UnaryFn::sin, "Sin"},
                                                                  {UnaryFn::cos, "Cos"},
                                                                  {UnaryFn::tanh, "Tanh"},
                                                                  {UnaryFn::sigmoid, "Sigmoid"},
                                                                  {UnaryFn::softplus, "Softplus"},
                                                                  {UnaryFn::softsign, "Softsign"},
                                                                  {UnaryFn::erf, "Erf"},
                                                                  {UnaryFn::hard_swish, "HardSwish"},
                                                                  {UnaryFn::relu, "Relu"}};
        const std::string x = in(0);
        const float p0 = n.attrs.fn_param[0], p1 = n.attrs.fn_param[1];
        auto same = [&](const char* op, std::vector<Message> attrs = {}) { onnx.node(op, {x}, out, attrs); };
        switch (n.attrs.unary) {
          case UnaryFn::expm1: {  // exp(x) - 1: within float32's absolute rounding of expm1 near 0
            const std::string e = onnx.node("Exp", {x}, tmp("_exp"));
            onnx.node("Sub", {e, scalar(out + "_one", 1.0f)}, out);
            break;
          }
          case UnaryFn::log1p: {  // log(1 + x)
            const std::string v = onnx.node("Add", {x, scalar(out + "_one", 1.0f)}, tmp("_add"));
            onnx.node("Log", {v}, out);
            break;
          }
          case UnaryFn::rsqrt: {  // 1 / sqrt(x), as trainkit computes it
            const std::string v = onnx.node("Sqrt", {x}, tmp("_sqrt"));
            onnx.node("Reciprocal", {v}, out);
            break;
          }
          case UnaryFn::square:
            onnx.node("Mul", {x, x}, out);
            break;
          case UnaryFn::gelu:
            gelu_exact(x, out);
            break;
          case UnaryFn::gelu_tanh: {  // x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2
            std::string v = onnx.node("Mul", {x, x}, tmp("_sq"));
            v = onnx.node("Mul", {v, x}, tmp("_cube"));
            v = onnx.node("Mul", {v, scalar(out + "_cubic", math::kGeluTanhCubic)}, tmp("_cubic_term"));
            v = onnx.node("Add", {x, v}, tmp("_inner"));
            v = onnx.node("Mul", {v, scalar(out + "_k", math::kSqrt2OverPi)}, tmp("_scaled"));
            v = onnx.node("Tanh", {v}, tmp("_tanh"));
            v = onnx.node("Add", {v, scalar(out + "_one", 1.0f)}, tmp("_add"));
            v = onnx.node("Mul", {x, v}, tmp("_mul"));
            onnx.node("Mul", {v, scalar(out + "_half", 0.5f)}, out);
            break;
          }
          case UnaryFn::silu: {  // x * sigmoid(x)
            const std::string s = onnx.node("Sigmoid", {x}, tmp("_sigmoid"));
            onnx.node("Mul", {x, s}, out);
            break;
          }
          case UnaryFn::mish: {  // x * tanh(softplus(x))
            std::string v = onnx.node("Softplus", {x}, tmp("_softplus"));
            v = onnx.node("Tanh", {v}, tmp("_tanh"));
            onnx.node("Mul", {x, v}, out);
            break;
          }
          case UnaryFn::hard_sigmoid:  // relu6(x + 3) / 6 = max(0, min(1, x / 6 + 1 / 2))
            same("HardSigmoid", {attr_float("alpha", 1.0f / 6.0f), attr_float("beta", 0.5f)});
            break;
          case UnaryFn::relu6:
            onnx.node("Clip", {x, scalar(out + "_min", 0.0f), scalar(out + "_max", 6.0f)}, out);
            break;
          case UnaryFn::selu:
            same("Selu", {attr_float("alpha", math::kSeluAlpha), attr_float("gamma", math::kSeluScale)});
            break;
          case UnaryFn::elu:
            same("Elu", {attr_float("alpha", p0)});
            break;
          case UnaryFn::leaky_relu:
            same("LeakyRelu", {attr_float("alpha", p0)});
            break;
          case UnaryFn::clip:
            onnx.node("Clip", {x, scalar(out + "_min", p0), scalar(out + "_max", p1)}, out);
            break;
          default: {
            const auto it = kNamesakes.find(n.attrs.unary);
            if (it == kNamesakes.end()) fail(id, "a Unary op without a function");
            same(it->second);
          }
        }
        break;
      }
      case graph::Op::Binary: {
        using graph::BinaryFn;
        static constexpr const char* kArithmetic[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
        const BinaryFn f = n.attrs.binary;
        const bool integers = n.dtype == DType::i32 || n.dtype == DType::i64;
        if (f == BinaryFn::squared_difference) {  // (a - b) * (a - b)
          const std::string d = onnx.node("Sub", {in(0), in(1)}, tmp("_sub"));
          onnx.node("Mul", {d, d}, out);
        } else if (f == BinaryFn::mod && integers) {  // Mod with fmod 0: the divisor's sign, as Python's %
          onnx.node("Mod", {in(0), in(1)}, out, {attr_int("fmod", 0)});
        } else if (f == BinaryFn::floor_divide && integers) {  // (a - a % b) / b: exact, so Div's truncation is exact
          const std::string m = onnx.node("Mod", {in(0), in(1)}, tmp("_mod"), {attr_int("fmod", 0)});
          onnx.node("Div", {onnx.node("Sub", {in(0), m}, tmp("_sub")), in(1)}, out);
        } else if (f == BinaryFn::floor_divide || f == BinaryFn::mod) {  // floor(a / b); a - floor(a / b) * b
          const std::string d = onnx.node("Div", {in(0), in(1)}, tmp("_div"));
          if (f == BinaryFn::floor_divide) {
            onnx.node("Floor", {d}, out);
          } else {
            const std::string q = onnx.node("Floor", {d}, tmp("_floor"));
            onnx.node("Sub", {in(0), onnx.node("Mul", {q, in(1)}, tmp("_mul"))}, out);
          }
        } else if (f < BinaryFn::squared_difference) {
          onnx.node(kArithmetic[static_cast<int>(f)], {in(0), in(1)}, out);
        } else {
          fail(id, "a Binary op without an arithmetic function");
        }
        break;
      }
      case graph::Op::Compare: {
        using graph::BinaryFn;
        static const std::map<BinaryFn, const char*> kComparisons = {{BinaryFn::equal, "Equal"},
                                                                     {BinaryFn::less, "Less"},
                                                                     {BinaryFn::less_equal, "LessOrEqual"},
                                                                     {BinaryFn::greater, "Greater"},
                                                                     {BinaryFn::greater_equal, "GreaterOrEqual"}};
        if (n.attrs.binary == BinaryFn::not_equal) {
          const std::string e = onnx.node("Equal", {in(0), in(1)}, tmp("_equal"));
          onnx.node("Not", {e}, out);
          break;
        }
        const auto it = kComparisons.find(n.attrs.binary);
        if (it == kComparisons.end()) fail(id, "a Compare op without a comparison");
        onnx.node(it->second, {in(0), in(1)}, out);
        break;
      }
      case graph::Op::Reduce: {
        using graph::ReduceFn;
        std::vector<int64_t> axes;
        for (int i = 0; i < rank_of(0); ++i)
          if (n.attrs.axes & (1u << i)) axes.push_back(i);
        if (axes.empty()) {  // over no axis: the input itself (ONNX would reduce over all)
          onnx.node("Identity", {in(0)}, out);
          break;
        }
        static constexpr const char* kReductions[] = {"ReduceSum", "ReduceMean", "ReduceMax",
                                                      "ReduceMin", "ReduceProd", "ReduceLogSumExp"};  // ReduceFn order
        static_assert(std::size(kReductions) == graph::kReduceFnCount);
        if (n.attrs.reduce >= ReduceFn::kCount) fail(id, "a Reduce op without a reduction");
        const char* op = kReductions[static_cast<int>(n.attrs.reduce)];
        const Message keep = attr_int("keepdims", n.attrs.keepdims ? 1 : 0);
        if (n.attrs.reduce == ReduceFn::sum)  // opset 13 on: axes as an input
          onnx.node(op, {in(0), i64s(out + "_axes", axes)}, out, {keep});
        else
          onnx.node(op, {in(0)}, out, {attr_ints("axes", axes), keep});
        break;
      }
      case graph::Op::ArgReduce: {  // ONNX's first index, int64; trainkit's int32
        const int a = n.attrs.axis < 0 ? n.attrs.axis + rank_of(0) : n.attrs.axis;
        if (n.attrs.reduce != graph::ReduceFn::max && n.attrs.reduce != graph::ReduceFn::min)
          fail(id, "an ArgReduce other than max or min");
        const std::string i = onnx.node(n.attrs.reduce == graph::ReduceFn::max ? "ArgMax" : "ArgMin", {in(0)},
                                        tmp("_i64"), {attr_int("axis", a), attr_int("keepdims", n.attrs.keepdims)});
        onnx.node("Cast", {i}, out, {attr_int("to", kInt32)});
        break;
      }
      case graph::Op::BroadcastTo: {
        const std::vector<int64_t> dims = n.attrs.shape.dims();
        const bool batch = !dims.empty() && dims[0] == kTraceBatch;
        onnx.node("Expand", {in(0), shape_tensor(id, out + "_shape", dims, batch)}, out);
        batched[static_cast<size_t>(id)] = batch;
        break;
      }
      case graph::Op::Transpose:
        onnx.node("Transpose", {in(0)}, out,
                  {attr_ints("perm", std::vector<int64_t>(n.attrs.perm, n.attrs.perm + rank_of(0)))});
        break;
      case graph::Op::Pad: {  // constant mode; pads = all befores, then all afters
        const int r = rank_of(0);
        std::vector<int64_t> pads(n.attrs.pad_before, n.attrs.pad_before + r);
        pads.insert(pads.end(), n.attrs.pad_after, n.attrs.pad_after + r);
        const std::string value = onnx.constant(tmp("_value"), n.dtype, {}, {n.attrs.value});
        onnx.node("Pad", {in(0), i64s(out + "_pads", pads), value}, out);
        break;
      }
      case graph::Op::OneHot: {  // ONNX counts negative indices from the end; trainkit (as TF) gives a row of 0s
        std::string idx = in(0);
        if (g[n.inputs[0]].dtype != DType::i64) idx = onnx.node("Cast", {idx}, tmp("_i64"), {attr_int("to", kInt64)});
        const std::string depth = onnx.constant(tmp("_depth"), DType::i64, {}, {static_cast<double>(n.attrs.depth)});
        const std::string neg =
            onnx.node("Less", {idx, onnx.constant(tmp("_zero"), DType::i64, {}, {0.0})}, tmp("_negative"));
        idx = onnx.node("Where", {neg, depth, idx}, tmp("_index"));
        const std::string values = onnx.constant_f32(tmp("_values"), {2}, {0.0f, 1.0f});
        if (n.attrs.dtype == DType::f32) {
          onnx.node("OneHot", {idx, depth, values}, out, {attr_int("axis", -1)});
        } else {
          const std::string y = onnx.node("OneHot", {idx, depth, values}, tmp("_f32"), {attr_int("axis", -1)});
          onnx.node("Cast", {y}, out, {attr_int("to", onnx_type(n.attrs.dtype))});
        }
        break;
      }
      case graph::Op::Pad2D: {
        const int64_t* p = n.attrs.pad;  // top, bottom, left, right of NHWC
        onnx.node("Pad", {in(0), onnx.constant_i64(onnx.unique(out + "_pads"), {0, p[0], p[2], 0, 0, p[1], p[3], 0})},
                  out);
        break;
      }
      case graph::Op::Conv2D:
      case graph::Op::MaxPool2D:
      case graph::Op::AvgPool2D: {
        const graph::Attrs& a = n.attrs;
        std::vector<Message> attrs{attr_ints("strides", {a.stride[0], a.stride[1]}),
                                   attr_ints("pads", {a.pad[0], a.pad[2], a.pad[1], a.pad[3]})};
        std::vector<std::string> ins{nhwc_to_nchw(in(0))};
        std::string op;
        if (n.op == graph::Op::Conv2D) {
          op = "Conv";
          const graph::Node& w = g[n.inputs[1]];  // (KH, KW, C, F) -> ONNX's (F, C, KH, KW)
          std::string kernel;
          if (w.op == graph::Op::Variable) {  // written transposed from its own memory (io/onnx_file.h)
            const Tensor& value = weights.at(w.name)->value;
            if (value.dtype() != DType::f32 || value.shape().rank() != 4)
              fail(id, "a convolution kernel that is not float32");
            kernel = onnx.weight(onnx.unique(w.name + "_fckk"), w.name, value, /*to_fckk=*/true);
          } else {
            kernel = onnx.node("Transpose", {in(1)}, onnx.unique(out + "_kernel"), {attr_ints("perm", {3, 2, 0, 1})});
          }
          ins.push_back(kernel);
          attrs.push_back(attr_ints("kernel_shape", {w.shape[0], w.shape[1]}));
          attrs.push_back(attr_ints("dilations", {a.dilation[0], a.dilation[1]}));
          if (a.groups != 1) attrs.push_back(attr_int("group", a.groups));  // ONNX's weight (F, C / group, KH, KW)
        } else {
          op = n.op == graph::Op::MaxPool2D ? "MaxPool" : "AveragePool";
          if (a.dilation[0] != 1 || a.dilation[1] != 1) fail(id, "a dilated pooling window");
          attrs.push_back(attr_ints("kernel_shape", {a.kernel[0], a.kernel[1]}));
          if (n.op == graph::Op::AvgPool2D) attrs.push_back(attr_int("count_include_pad", 0));  // as Keras
        }
        const std::string y = onnx.node(op, ins, onnx.unique(out + "_nchw"), attrs);
        nchw_to_nhwc(y, out);
        break;
      }
      case graph::Op::BnInference: {  // (x, moving_mean, moving_variance, gamma, beta) on the last axis
        std::vector<std::vector<float>> v;
        for (size_t i = 1; i < 5; ++i) {
          const graph::Node& p = g[n.inputs[i]];
          if (p.op != graph::Op::Variable) fail(id, "batch normalization whose statistics are not weights");
          v.push_back(host_floats(weights.at(p.name)->value));
        }
        const int64_t ch = static_cast<int64_t>(v[0].size());
        std::vector<float> scale(v[0].size()), shift(v[0].size());
        for (size_t k = 0; k < scale.size(); ++k) {
          scale[k] = v[2][k] / std::sqrt(v[1][k] + n.attrs.epsilon);
          shift[k] = std::fma(-v[0][k], scale[k], v[3][k]);  // explicit fma: the same bytes in every build
        }
        const std::string y = onnx.node("Mul", {in(0), onnx.constant_f32(onnx.unique(out + "_scale"), {ch}, scale)},
                                        onnx.unique(out + "_mul"));
        onnx.node("Add", {y, onnx.constant_f32(onnx.unique(out + "_shift"), {ch}, shift)}, out);
        break;
      }
      case graph::Op::LayerNormStats:  // folded into its LayerNormApply's LayerNormalization
        break;
      case graph::Op::LayerNormApply: {  // (x, LayerNormStats(x), gamma, beta) over the last axis: opset 17's own op
        const graph::Node& st = g[n.inputs[1]];
        if (st.op != graph::Op::LayerNormStats || st.inputs[0] != n.inputs[0])
          fail(id, "a layer normalization whose statistics are not its input's");
        onnx.node("LayerNormalization", {in(0), in(2), in(3)}, out,
                  {attr_int("axis", -1), attr_float("epsilon", n.attrs.epsilon)});
        break;
      }
      default:
        fail(id, "no ONNX mapping for this op");
    }
    name[static_cast<size_t>(id)] = out;
  }
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const int id = c.outputs[k];
    std::string out = g[id].op == graph::Op::Variable ? variable(id) : name[static_cast<size_t>(id)];
    if (g[id].op == graph::Op::Input || g[id].op == graph::Op::Variable)
      out = onnx.node("Identity", {out}, onnx.unique("output_" + std::to_string(k)));
    outputs.push_back(value_info(out, g[id].shape, onnx_type(g[id].dtype)));
  }

  // ModelProto{ir_version 1, producer_name 2, producer_version 3, graph 7, opset_import 8: {domain 1, version 2}},
  // streamed: the weights' bytes go from their own memory to the file (io/onnx_file.h).
  io::onnx::ModelParts& parts = onnx.parts();
  parts.head.i64(1, kIrVersion).str(2, "trainkit").str(3, "0.1.0");
  parts.tail.msg(8, Message().str(1, "").i64(2, kOpset));
  parts.graph_name = model.name();
  parts.inputs = std::move(inputs);
  parts.outputs = std::move(outputs);
  io::onnx::write_model(path, parts);
}

}  // namespace tk::io
