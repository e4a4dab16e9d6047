// Embedding (Keras 3), a composite layer: the lookup is the general gather op (graph/tensor_ops.h), whose gradient is
// the deterministic GatherGrad (a scatter-add in index order, no atomics). Weight: embeddings (input_dim, output_dim).
// Token ids come as an int32 / int64 Input (kept as they are) or as floats (cast to int32, as Keras casts a
// non-integer input). An id outside [0, input_dim) is the gather kernel's InvalidArgument, which names this layer's
// gather node, the id, where it sits in the batch and the table's size.
// mask_zero=True: the output carries Keras' mask ids != 0 (nn/layers/masks.h), which the following layers propagate
// and consume as Keras does (nn::MaskSupport::compute_mask).
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class EmbeddingLayer final : public Layer, public nn::MaskSupport {
 public:
  EmbeddingLayer(int64_t input_dim, int64_t output_dim, layers::EmbeddingOptions o)
      : Layer("embedding", o.name), input_dim_(input_dim), output_dim_(output_dim), o_(std::move(o)) {
    if (input_dim_ <= 0 || output_dim_ <= 0)
      throw InvalidArgument("Embedding '" + name + "': input_dim and output_dim must be positive, got " +
                            std::to_string(input_dim_) + " and " + std::to_string(output_dim_));
    // Keras' Embedding names its default "uniform": RandomUniform(-0.05, 0.05), trainkit's random_uniform.
    if (o_.embeddings_initializer == "uniform") o_.embeddings_initializer = "random_uniform";
    if (o_.embeddings_initializer == "normal") o_.embeddings_initializer = "random_normal";
    nn::check_initializer(o_.embeddings_initializer);
  }
  std::string class_name() const override { return "Embedding"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("input_dim", input_dim_)
        .set("output_dim", output_dim_)
        .set("embeddings_initializer", o_.embeddings_initializer)
        .set("mask_zero", o_.mask_zero);
  }

  Shape build(const std::vector<Shape>& in) override {
    if (!built_) add_weight("embeddings", Shape{input_dim_, output_dim_}, o_.embeddings_initializer);
    std::vector<int64_t> out(in[0].dims().begin(), in[0].dims().end());  // (None, ...) -> (None, ..., output_dim)
    out.push_back(output_dim_);
    return Shape(out);
  }

  // Keras' Embedding.compute_mask: ops.not_equal(inputs, 0) with mask_zero, else None (an input's mask ends here).
  int compute_mask(nn::CallContext& ctx, const std::vector<int>& in, int /*output*/) const override {
    if (!o_.mask_zero) return -1;
    graph::OpBuilder b{ctx.g, nullptr, name + "/mask"};
    return nn::masks::not_equal(b, in[0], 0.0f);  // (N, ...)
  }

  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int ids = in[0];  // (N, ...) token ids
    const DType t = ctx.g[ids].dtype;
    if (t != DType::i32 && t != DType::i64) ids = ctx.cast(ids, DType::i32, name + "/cast_ids");
    graph::OpBuilder b{ctx.g, nullptr, name};
    // The rows are gathered from the float32 table, then cast to the compute dtype (a mixed policy's 16 bits): the
    // same values as casting the table first, without casting every row of it each step, and the gradient is the
    // float32 GatherGrad.
    const int rows = ops::gather(b, ctx.raw_variable(weights_[0]), ids, 0);  // (N, ..., output_dim)
    return ctx.cast(rows, ctx.compute, name + "/cast_rows");
  }

 private:
  int64_t input_dim_, output_dim_;
  layers::EmbeddingOptions o_;
};

}  // namespace

namespace layers {
LayerPtr Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options) {
  return std::make_shared<EmbeddingLayer>(input_dim, output_dim, std::move(options));
}
}  // namespace layers

}  // namespace tk
