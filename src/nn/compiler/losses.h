// Keras 3's losses in a training program: the names Keras' compile accepts, and the loss value each one emits.
// The losses trainkit had first (mean squared error and the three crossentropies, without options) are fused ops
// (MseLoss, BceLoss, CceLoss, SparseCceLoss); label smoothing feeds those ops smoothed targets; every other loss
// (and SparseCategoricalCrossentropy with ignore_class) is composed from the general ops (graph/tensor_ops.h), so its
// gradient comes from autodiff. Every loss reduces as Keras' "sum_over_batch_size": the mean over the batch and
// any further axes of the per-position loss (the class axis reduced first, by the loss's own sum or mean).
//
//   const std::string n = tk::nn::canonical_loss_name("mae");              // "mean_absolute_error"
//   int loss = tk::nn::emit_loss(g, loss, y_pred, y_true, "loss");        // a float32 scalar
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "trainkit/nn/losses.h"

namespace tk::nn {

// One loss Keras knows: its snake_case name (what trainkit stores), its class, the name its get_config writes.
struct LossClass {
  const char* name;         // "mean_absolute_error"
  const char* keras_class;  // "MeanAbsoluteError"
  const char* config_name;  // "mean_absolute_error" (Huber: "huber_loss")
};
const std::vector<LossClass>& loss_classes();
// The snake_case name for a name, an alias ("mae", "kld", "bce") or a class name ("Huber"); InvalidArgument listing
// the known names otherwise.
std::string canonical_loss_name(const std::string& name);
const LossClass& loss_class(const Loss& loss);
// Checks the name and the options (label_smoothing in [0, 1], delta > 0, gamma >= 0, ...; an option the loss does
// not have left at its default); InvalidArgument naming the loss and the option.
void validate_loss(const Loss& loss);
// Integer class ids as targets (SparseCategoricalCrossentropy).
bool is_sparse(const Loss& loss);
// The fused op computing `loss` directly (no options that change its math), or nullopt when it is composed.
std::optional<graph::Op> fused_loss_op(const Loss& loss);
// `x` reduced over every axis to a scalar (Keras' "sum_over_batch_size" means, a metric's counts, a weight's norm or
// penalty): losses, metrics, regularizers and optimizers.
int reduce_all_axes(graph::OpBuilder& b, graph::ReduceFn f, int x);

// Emits the loss of predictions y_pred (float32) against targets y_true (float32, or int32 class ids when sparse):
// a float32 scalar named `name`.
int emit_loss(graph::Graph& g, const Loss& loss, int y_pred, int y_true, const std::string& name);
// The loss weighted by Keras' sample_weight `weight` (or -1: none; float32, (batch,) or (batch, 1) for losses per
// row, the per-position losses' shape, e.g. (batch, steps), or (batch, 1) broadcast over the steps), as Keras 3
// reduces it (losses/loss.py reduce_weighted_values): sum(loss * weight) over the count of positions
// ("sum_over_batch_size": not over the sum of the weights); with a Keras mask `mask` (or -1; float32 0/1 of the
// per-step losses' shape, (batch, steps): losses/loss.py apply_mask) and ignore_class, over the count of the kept
// positions (0 when none is kept); a step counts when it is unmasked and its target is not the ignored class. Always
// composed from the general ops. InvalidArgument when the weights' shape does not match the per-position losses,
// Unsupported when the mask's does not.
int emit_weighted_loss(graph::Graph& g, const Loss& loss, int y_pred, int y_true, int mask, int weight,
                       const std::string& name);

}  // namespace tk::nn
