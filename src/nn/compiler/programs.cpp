#include "nn/compiler/programs.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_map>

#include "core/device_bytes.h"
#include "graph/alias.h"
#include "graph/autodiff.h"
#include "graph/bucket.h"
#include "graph/fuse.h"
#include "nn/compiler/constraint_ops.h"
#include "nn/compiler/losses.h"
#include "nn/compiler/metrics.h"
#include "nn/compiler/regularization.h"
#include "nn/distribute/strategy_state.h"
#include "nn/layers/context.h"
#include "nn/layers/input_layer.h"
#include "nn/optimizer_rule.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/memory_plan.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/runtime/memory.h"

namespace tk::nn {
using graph::Op;

// A Rescaling that reads a model input directly becomes part of staging: the batch is converted with
// x * scale + offset while it is copied in (one pass over the data instead of a copy and an op), and the
// narrow source data (uint8 images, float16 features) is widened at the same time. Only when every reader
// of the input is such a Scale with the same factors, and no Scale is itself an output. Under a mixed policy the
// input is cast to 16 bits first (Input -> Cast -> Scale): the scale is staged as well and the Cast reads the scaled
// input, so the product is rounded to 16 bits once where Keras rounds the input and then the product (the same bits
// for inputs that 16 bits hold exactly, as uint8 pixels in bfloat16 and float16; closer to the exact product
// otherwise), and the 16-bit Scale op, which widens, multiplies and rounds again, is gone.
// c.x must be the program's inputs as traced (float32); the inputs staged in 16 bits change their node's dtype.
void fuse_input_scaling(graph::Graph& g, Compiled& c, const std::vector<int>& keep) {
  auto readers_of = [&](int value) {
    std::vector<int> out;
    for (int id = 0; id < g.size(); ++id)
      if (std::find(g[id].inputs.begin(), g[id].inputs.end(), value) != g[id].inputs.end()) out.push_back(id);
    return out;
  };
  auto kept = [&](int id) { return std::find(keep.begin(), keep.end(), id) != keep.end(); };
  // Whether every node in `scales` is a Scale (not kept) with the factors of the first.
  auto same_scales = [&](const std::vector<int>& scales) {
    for (int id : scales)
      if (g[id].op != Op::Scale || kept(id) || g[id].attrs.scale != g[scales[0]].attrs.scale ||
          g[id].attrs.offset != g[scales[0]].attrs.offset)
        return false;
    return !scales.empty();
  };
  auto bypass = [&](const std::vector<int>& scales, int source) {  // the Scales' readers read `source` instead
    for (graph::Node& n : g.nodes)
      for (int& in : n.inputs)
        if (std::find(scales.begin(), scales.end(), in) != scales.end()) in = source;
  };
  for (size_t i = 0; i < c.x.size(); ++i) {
    const int x = c.x[i];
    const std::vector<int> readers = readers_of(x);
    if (same_scales(readers)) {
      c.x_scale[i] = StageScale{g[readers[0]].attrs.scale, g[readers[0]].attrs.offset};
      bypass(readers, x);
      continue;
    }
    // Input -> Cast(16 bits) -> Scale, every cast read by Scales alone, all with one set of factors (TK_FUSE=0: not).
    std::vector<std::pair<int, std::vector<int>>> casts;
    std::vector<int> all_scales;
    bool fusable = !readers.empty() && graph::fusion_enabled();
    for (int r : readers) {
      fusable = fusable && g[r].op == Op::Cast && !kept(r) && (g[r].dtype == DType::bf16 || g[r].dtype == DType::f16);
      if (!fusable) break;
      casts.emplace_back(r, readers_of(r));
      all_scales.insert(all_scales.end(), casts.back().second.begin(), casts.back().second.end());
    }
    if (!fusable || !same_scales(all_scales)) continue;
    c.x_scale[i] = StageScale{g[all_scales[0]].attrs.scale, g[all_scales[0]].attrs.offset};
    for (const auto& [cast, scales] : casts) bypass(scales, cast);
  }
  // Then, under a mixed policy, an input read only by casts to one 16-bit dtype is staged in that dtype: staging
  // converts (and scales) each batch straight into 16 bits, the same rounding the cast made, so the cast op and the
  // float32 copy of the batch are gone. TK_FUSE=0: not.
  if (!graph::fusion_enabled()) return;
  for (const int x : c.x) {
    const std::vector<int> readers = readers_of(x);
    if (readers.empty()) continue;
    const DType t = g[readers[0]].dtype;
    bool casts_only = t == DType::bf16 || t == DType::f16;
    for (int r : readers) casts_only = casts_only && g[r].op == Op::Cast && g[r].dtype == t && !kept(r);
    if (!casts_only) continue;
    g[x].dtype = t;
    bypass(readers, x);
  }
}

std::vector<const graph::Program*> ProgramCache::programs() const {
  std::vector<const graph::Program*> out;
  for (const auto& [key, c] : cache_)
    if (c->program) out.push_back(c->program.get());
  return out;
}

std::vector<Weight*> ProgramCache::trainable_weights() const {
  std::vector<Weight*> out;
  for (const LayerPtr& l : model_.layers())
    if (l->trainable)
      for (Weight& w : l->weights())
        if (w.trainable) out.push_back(&w);
  return out;
}

ProgramCache::~ProgramCache() {
  try {
    synchronize();
  } catch (const std::exception&) {  // the context is gone: nothing runs
  }
}

void* ProgramCache::stream() const { return stream_ ? stream_->get() : nullptr; }

void ProgramCache::synchronize() const {
  if (stream_) stream_->synchronize();
}

ProgramCache::ProgramCache(Trainer& trainer, Model& m, int replica)
    : trainer_(trainer), model_(m), optimizer_(m.optimizer()), replica_(replica), device_(m.device()) {
  if (const auto& s = trainer_.strategy()) {
    if (replica < 0 || replica >= s->replicas())
      throw InvalidArgument("ProgramCache: replica " + std::to_string(replica) + " of " +
                            std::to_string(s->replicas()));
    device_ = s->devices[static_cast<size_t>(replica)];
    collective_ = s->program_collective();
    bytes_per_pack_ = s->bytes_per_pack;
    overlap_ = s->overlap;
  } else if (replica != 0) {
    throw InvalidArgument("ProgramCache: replica " + std::to_string(replica) + " of a model without a strategy");
  }
  const auto sync = [this] { synchronize(); };
  state_ = std::make_unique<OptimizerState>(optimizer_, device_, sync);
  // A device planned for but not here (trainkit plan --device cuda on a machine without one) has no memory to copy
  // the weights into: its programs are traced over the model's own weights, and never run.
  const bool mirrors = replica_ > 0 || (device_.kind != DeviceKind::cpu && trainer_.absent_device_budget() == 0);
  mirrors_ = std::make_unique<DeviceMirrors>(model_, device_, replica_, mirrors, sync);
}

void ProgramCache::sync_from(const ProgramCache& primary) {
  if (replica_ == 0) return;
  mirrors_->copy_from(*primary.mirrors_);
  state_->copy_from(*primary.state_, trainable_weights());
}

std::vector<std::pair<std::string, Tensor*>> ProgramCache::state_tensors() {
  synchronize();  // the caller copies them (MPI broadcasts, a training state)
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const LayerPtr& l : model_.layers())
    for (const Weight& w : l->weights()) out.emplace_back(w.name, mirrors_->storage(w, true));
  state_->append_state_tensors(trainable_weights(), out);
  return out;
}

std::vector<int> ProgramCache::all_reduce(graph::Graph& g, const std::vector<int>& grads,
                                          const std::vector<Weight*>& weights, bool zero_inputs) {
  if (!collective_) return grads;
  std::vector<std::string> names;
  for (const Weight* w : weights) names.push_back(w->name);
  return graph::add_all_reduces(g, grads, names, {collective_, replica_, bytes_per_pack_, zero_inputs, overlap_});
}

std::string ProgramCache::arena_owner() const {
  return replica_ == 0 ? model_.name() : model_.name() + " (replica " + std::to_string(replica_) + ")";
}

int64_t ProgramCache::weight_key(ProgramKind kind) const {
  const bool weighs = kind == ProgramKind::train || kind == ProgramKind::eval || kind == ProgramKind::accumulate;
  return weighs ? trainer_.sample_weight_key : 0;
}

Compiled& ProgramCache::get(ProgramKind kind, int64_t batch) {
  const Device d = device_;
  const Key key{static_cast<int>(kind), batch, d.kind, d.index, weight_key(kind)};
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    // A program that updates the weights has a StepControl node or not, as the optimizer's config asked when it was
    // built; one changed since (a callback set global_clipnorm or skip_nonfinite) builds it again.
    const bool updates = kind == ProgramKind::train || kind == ProgramKind::apply;
    if (!updates || it->second->step_controlled == wants_step_control()) return *it->second;
    synchronize();  // nothing queued may still use the program about to go
    cache_.erase(it);
  }
  return *cache_.emplace(key, build(kind, batch)).first->second;
}

size_t ProgramCache::persistent_bytes() const {
  return (arena_.defined() ? allocated_bytes(arena_.nbytes()) : 0) + state_->bytes();
}

size_t ProgramCache::held_bytes() const { return persistent_bytes() + mirrors_->bytes(); }

std::unique_ptr<Compiled> ProgramCache::build(ProgramKind kind, int64_t batch) {
  // Programs of one model never run at the same time, so they share one arena as large as the largest
  // plan: a validation or last-partial-batch program costs no extra memory. The arena is released before
  // tracing — the trace may create optimizer state or gradient accumulators, which should not compete
  // with an arena that is about to be re-sized — and the old and new arenas are never held together.
  synchronize();  // the old arena goes back to the device's memory: nothing queued may still use it
  size_t needed = 0;
  for (auto& [key, c] : cache_) {
    needed = std::max(needed, c->program->arena_bytes_required());
    c->program->bind_arena(Tensor());
  }
  const size_t before = needed;
  arena_ = Tensor();
  auto restore = [&] {  // give the programs that worked before their arena back, or forget them
    if (before == 0) return;
    try {
      arena_ = Tensor(Shape{static_cast<int64_t>(before)}, DType::u8, device_, arena_owner() + ": program arena");
      for (auto& [key, c] : cache_) c->program->bind_arena(arena_);
    } catch (const OutOfMemoryError&) {
      cache_.clear();  // they are rebuilt (and their arena planned again) when next needed
    }
  };
  static const char* const kKind[] = {"train", "eval", "predict", "accumulate", "apply"};
  std::unique_ptr<Compiled> compiled;
  try {
    // One trace; a second only when the automatic rematerialization finds the plain plan does not fit.
    const bool trains = kind == ProgramKind::train || kind == ProgramKind::accumulate;
    Traced t = trace(kind, batch, true, trains && model_.rematerialization == Remat::on);
    if (trains && model_.rematerialization == Remat::automatic &&
        plan_from_trace(t, model_.layers(), device_, batch, false, {}).total >
            trainer_.replica_memory_available(replica_))
      t = trace(kind, batch, true, true);
    trainer_.run_policies().clear();  // what the programs are built under (Model::check_compiled)
    for (const LayerPtr& l : model_.layers()) trainer_.run_policies().push_back(model_.layer_dtype_policy(*l));
    t.compiled->program = std::make_unique<graph::Program>(std::move(t.g), t.keep, t.sinks, device_, "", false);
    const size_t own = t.compiled->program->arena_bytes_required();
    needed = std::max(needed, own);
    const std::string owner =
        arena_owner() + ": program arena (" + kKind[static_cast<int>(kind)] + ", batch " + std::to_string(batch) + ")";
    try {
      arena_ = Tensor(Shape{static_cast<int64_t>(needed)}, DType::u8, device_, owner);
    } catch (const OutOfMemoryError&) {
      if (needed == own) throw;
      // Keeping every cached program is what does not fit: evict those larger than this one (they are
      // rebuilt if used again, e.g. after switching from whole batches to micro-batches).
      std::erase_if(cache_, [&](const auto& kv) { return kv.second->program->arena_bytes_required() > own; });
      needed = own;
      arena_ = Tensor(Shape{static_cast<int64_t>(needed)}, DType::u8, device_, owner);
    }
    compiled = std::move(t.compiled);
    compiled->step_controlled = wants_step_control();  // after the trace, which may have turned loss scaling on
  } catch (const OutOfMemoryError& e) {
    restore();
    // The report's first remedy, made concrete: the batch size the plan says fits now.
    std::string what = e.what();
    if (kind == ProgramKind::train || kind == ProgramKind::accumulate) {
      const int64_t fits =
          trainer_.largest_batch_that_fits_on(replica_, trainer_.replica_memory_available(replica_), batch);
      what += fits > 0 ? "\n  a batch of " + std::to_string(fits) +
                             " fits this budget now (fit with batch_size=" + std::to_string(fits) +
                             ", batch_size=tk::kAutoBatchSize, or micro_batch_size=" + std::to_string(fits) +
                             " to keep the batch of " + std::to_string(batch) + ")"
                       : "\n  not even a batch of 1 fits this budget: raise the budget or make the model smaller";
      // The second remedy, with its number: the same step under the other dtype policy (planned, not run).
      try {
        const MemoryPlan p = model_.memory_plan(batch);
        if (p.alternative_total > 0 && p.alternative_total < p.total)
          what += "\n  mixed precision: under " + p.alternative_policy + " this step would take " +
                  config::format_bytes(p.alternative_total) + " instead of " + config::format_bytes(p.total) +
                  " (--dtype-policy " + p.alternative_policy +
                  ", or tk::mixed_precision::set_global_policy before "
                  "making the model)";
      } catch (const Error&) {  // the report stands without it
      }
    }
    throw OutOfMemoryError(what);
  } catch (...) {
    restore();
    throw;
  }
  for (auto& [key, c] : cache_) c->program->bind_arena(arena_);
  // One compute stream per cache (a model, or one data-parallel replica on its own thread), made once, on a device
  // whose backend has streams (the CPU's has none: stream_ stays null).
  if (!stream_ && mirrors_->active()) stream_ = graph::backend(device_.kind).make_stream(device_);
  compiled->program->set_stream(stream());
  compiled->program->bind_arena(arena_);
  return compiled;
}

bool ProgramCache::wants_step_control() const {
  if (!optimizer_) return false;  // predict before compile
  const graph::UpdateConfig& c = optimizer_->config();
  return c.global_clipnorm > 0.0f || c.skip_nonfinite || c.loss_scale_initial > 0.0f;
}

int ProgramCache::step_control(graph::Graph& g, const std::vector<int>& grads, bool allocate) {
  graph::UpdateConfig& c = optimizer_->config();
  const bool scaling = c.loss_scale_initial > 0.0f;
  if (!wants_step_control()) return -1;
  std::vector<int> live;
  for (int gr : grads)
    if (gr >= 0) live.push_back(gr);
  if (live.empty()) return -1;
  if (scaling) live.push_back(state_->loss_scale_variable(g, allocate));
  graph::Attrs at;
  at.update = &c;
  return g.add(Op::StepControl, live, at, "optimizer/step_control");
}

bool ProgramCache::scales_loss() const {
  if (optimizer_->config().loss_scale_initial > 0.0f) return true;
  if (!model_.auto_scale_loss) return false;
  for (const LayerPtr& l : model_.layers())  // Keras: automatic for float16 compute, not for bfloat16
    if (model_.layer_compute_dtype(*l) == DType::f16) return true;
  return false;
}

bool ProgramCache::enable_loss_scaling() {
  graph::UpdateConfig& c = optimizer_->config();
  if (c.loss_scale_initial > 0.0f) return true;
  if (!scales_loss()) return false;
  c.loss_scale_initial = 32768.0f;  // LossScaleOptimizer's defaults
  c.loss_scale_growth_steps = 2000;
  return true;
}

void ProgramCache::add_update(graph::Graph& g, const Weight& w, int var, int grad, bool zero_grad, bool allocate_slots,
                              int control, std::vector<int>& sinks) {
  Optimizer& opt = *optimizer_;
  std::vector<int> slot_values;
  std::vector<Tensor>* slots =
      state_->slots_of(w, allocate_slots);  // optimizer state is created with the first program
  for (int s = 0; s < opt.slots_per_variable(); ++s) {
    const std::string slot_name = w.name + "/slot" + std::to_string(s);
    slot_values.push_back(
        slots != nullptr ? g.variable(slot_name, (*slots)[static_cast<size_t>(s)])
                         : g.placeholder_variable(slot_name, nn::slot_shape(opt, s, w.value.shape()), w.value.dtype()));
  }
  if (nn::emits_ops(opt)) {  // an optimizer written in the general ops: its ops, then an Assign per value
    const std::vector<int> assigns = nn::emit_rule_update(g, opt, w.name + "/update", var, grad, slot_values, control,
                                                          zero_grad, state_->variables_of(allocate_slots));
    sinks.insert(sinks.end(), assigns.begin(), assigns.end());
    add_constraint(g, w, var, sinks);
    return;
  }
  const Op update = opt.config().update_op;  // the optimizer's own rule, never a guess from its name
  std::vector<int> ins{var, grad};
  ins.insert(ins.end(), slot_values.begin(), slot_values.end());
  graph::Attrs at;
  at.update = &opt.config();
  at.zero_grad = zero_grad;
  if (control >= 0) {  // the whole step waits for the predicate over all gradients
    ins.push_back(control);
    at.gated = true;
  }
  sinks.push_back(g.add(update, ins, at, w.name + "/update"));
  add_constraint(g, w, var, sinks);
}

void ProgramCache::add_constraint(graph::Graph& g, const Weight& w, int var, std::vector<int>& sinks) {
  for (const LayerPtr& l : model_.layers())  // Keras: variable.assign(constraint(variable)) after the update
    for (const Weight& own : l->weights())
      if (&own == &w) {
        check_constraint_keys(*l);
        if (const Constraint* c = l->constraint_of(w)) sinks.push_back(emit_constraint(g, *c, var, w));
        return;
      }
}

ProgramCache::Traced ProgramCache::trace(ProgramKind kind, int64_t batch, bool allocate_slots, bool remat,
                                         graph::RematStats* stats, bool fuse) {
  Traced traced;
  traced.compiled = std::make_unique<Compiled>();
  Compiled* c = traced.compiled.get();
  graph::Graph& g = traced.g;
  if (kind == ProgramKind::apply) {  // one optimizer step from the accumulated gradients, which it clears
    std::vector<Weight*> ws;
    std::vector<int> accs;
    for (Weight* w : trainable_weights())
      if (state_->reached(*w)) {
        ws.push_back(w);
        accs.push_back(state_->accumulator(g, *w, allocate_slots));
      }
    enable_loss_scaling();
    // Data parallel: the replicas' accumulated gradients are summed (and the accumulators cleared) first.
    const bool reduced = collective_ != nullptr;
    accs = all_reduce(g, accs, ws, true);
    const int control = step_control(g, accs, allocate_slots);
    for (size_t i = 0; i < ws.size(); ++i) {
      Tensor* var = mirrors_->storage(*ws[i], allocate_slots);
      const int v = var ? g.variable(ws[i]->name, *var)
                        : g.placeholder_variable(ws[i]->name, ws[i]->value.shape(), ws[i]->value.dtype());
      add_update(g, *ws[i], v, accs[i], !reduced, allocate_slots, control, traced.sinks);
    }
    if (fuse && graph::fusion_enabled()) traced.sinks = graph::group_updates(g, traced.sinks);
    return traced;
  }
  CallContext ctx{g, kind == ProgramKind::train || kind == ProgramKind::accumulate, DType::f32, {}, {}, {}};
  if (ctx.training) {  // data parallel: layers that sum over the replicas (synchronized BatchNormalization)
    ctx.collective = collective_;
    ctx.replica = replica_;
    ctx.micro_batch = kind == ProgramKind::accumulate;
  }
  if (mirrors_->active()) {  // this replica's / device's copies of the weights (made there before the first trace)
    for (const LayerPtr& l : model_.layers())
      for (const Weight& w : l->weights()) mirrors_->storage(w, true);
    ctx.storage = [this](const Weight& w) -> Tensor& { return *mirrors_->storage(w, false); };
  }

  // Forward: walk the layer-call DAG from the outputs (memoized per symbolic node: its outputs' values, in order).
  std::unordered_map<const KerasTensor::NodeData*, std::vector<int>> value;
  // Keras masks of layer outputs, as values in the graph (nn::MaskSupport::compute_mask); absent or -1: none. A
  // node's first output alone carries one (Keras' RNN.compute_mask: the states have none).
  std::unordered_map<const KerasTensor::NodeData*, int> mask;
  auto mask_of = [&mask](const KerasTensor& t) {
    auto m = t.index == 0 ? mask.find(t.node.get()) : mask.end();
    return m == mask.end() ? -1 : m->second;
  };
  for (size_t i = 0; i < model_.inputs().size(); ++i) {
    const KerasTensor& in = model_.inputs()[i];
    int id = g.input(in.node->layer ? in.node->layer->name : "input_" + std::to_string(i), in.shape().with_batch(batch),
                     model_.input_dtype(i));
    value[in.node.get()] = {id};
    c->x.push_back(id);
  }
  c->x_scale.assign(c->x.size(), StageScale{});
  c->x_conversion_seen.assign(c->x.size(), 0);
  c->conversions_logged = conversions_logged_;
  // Each layer runs in its compute dtype (its dtype policy): floating inputs are cast to it, and weights are
  // read through casts (CallContext::variable). A layer whose math is float32 (BatchNormalization) hands its
  // output back in the policy's dtype, as Keras does.
  // Keras' regularization losses (nn/compiler/regularization.h), added to the compiled loss below: activity
  // penalties as their layers are called, weight penalties after the forward pass.
  const bool regularized = kind != ProgramKind::predict;
  std::vector<int> penalties;
  std::function<int(const KerasTensor&)> eval = [&](const KerasTensor& t) -> int {
    auto found = value.find(t.node.get());
    if (found != value.end()) return found->second.at(static_cast<size_t>(t.index));
    std::vector<int> ins;
    for (const KerasTensor& x : t.node->inputs) ins.push_back(eval(x));
    const Layer& layer = *t.node->layer;
    ctx.compute = model_.layer_compute_dtype(layer);
    for (int& in : ins)
      if (is_floating(g[in].dtype)) in = ctx.cast(in, ctx.compute, layer.name + "/cast_input");
    std::vector<int> masks;
    for (const KerasTensor& x : t.node->inputs) masks.push_back(mask_of(x));
    const bool masked = std::any_of(masks.begin(), masks.end(), [](int m) { return m >= 0; });
    ctx.input_masks = masked ? masks : std::vector<int>{};
    ctx.call_options = &t.node->call_options;
    std::vector<int> ids = layer.call_outputs(ctx, ins);
    if (regularized && layer.activity_regularizer)
      for (size_t k = 0; k < ids.size(); ++k) {
        const Shape out = g[ids[k]].shape;  // a copy: g grows below
        if (!is_floating(g[ids[k]].dtype)) continue;
        const float scale = out.rank() > 0 && out[0] > 0 ? 1.0f / static_cast<float>(out[0]) : 1.0f;
        const int p = emit_penalty(g, *layer.activity_regularizer, ids[k], scale, layer.name + "/activity_regularizer");
        if (p >= 0) penalties.push_back(p);
      }
    // A layer without Keras' supports_masking drops its inputs' masks, as Keras does (with a warning there).
    const auto* masking = dynamic_cast<const MaskSupport*>(&layer);
    mask[t.node.get()] = masking ? masking->compute_mask(ctx, ins, ids[0]) : -1;
    ctx.call_options = nullptr;
    ctx.input_masks.clear();
    const DType policy = mixed_precision::compute_dtype(model_.layer_dtype_policy(layer));
    for (int& id : ids)
      if (layer.computes_in_float32() && is_floating(g[id].dtype))
        id = ctx.cast(id, policy, layer.name + "/cast_output");
    ctx.compute = DType::f32;
    value[t.node.get()] = ids;
    return ids.at(static_cast<size_t>(t.index));
  };
  // Model outputs, and with them losses and metrics, are float32 (Keras).
  for (const KerasTensor& o : model_.outputs()) {
    const int out = eval(o);
    c->outputs.push_back(is_floating(g[out].dtype) ? ctx.cast(out, DType::f32, o.node->layer->name + "/cast_output")
                                                   : out);
  }

  std::vector<int> keep = c->outputs;
  std::vector<int> sinks;
  if (regularized)
    for (const LayerPtr& l : model_.layers()) {
      check_regularizer_keys(*l);
      if (!l->trainable) continue;  // Keras sums the regularizers of trainable_weights only
      for (const Weight& w : l->weights())
        if (const Regularizer* r = w.trainable ? l->regularizer_of(w) : nullptr) {
          const int p = emit_penalty(g, *r, ctx.raw_variable(w), 1.0f, w.name + "/regularizer");
          if (p >= 0) penalties.push_back(p);
        }
    }
  if (kind != ProgramKind::predict) {
    const bool multi = model_.outputs().size() > 1;
    std::vector<int> losses;
    std::vector<std::pair<std::string, int>> metric_logs;
    std::vector<LogStat> metric_stats;
    // Keras' sample_weight (nn/training/sample_weights.h): one input, (batch,) or (batch, k), weighting every output's
    // loss (Keras repeats one array of per-row weights for each output); staged after the targets.
    const int64_t wkey = weight_key(kind);
    const int weight =
        wkey == 0 ? -1 : g.input("sample_weight", wkey < 0 ? Shape{batch} : Shape{batch, wkey}, DType::f32);
    for (size_t j = 0; j < model_.outputs().size(); ++j) {
      const Loss& loss = model_.losses().size() == 1 ? model_.losses()[0] : model_.losses()[j];  // one loss for all
      const Shape out_shape = g[c->outputs[j]].shape;  // a copy: g grows below
      const std::string prefix = multi ? model_.outputs()[j].node->layer->name + "_" : "";
      // An output still carrying a Keras mask (a sequence after Embedding(mask_zero=True) or Masking): its loss and
      // mean metrics are weighted by the mask, as Keras 3 does (losses/loss.py apply_mask).
      const int out_mask = mask_of(model_.outputs()[j]);
      Shape target_shape = out_shape;
      DType target_dtype = DType::f32;
      if (is_sparse(loss)) {
        target_shape = Shape(std::vector<int64_t>(out_shape.dims().begin(), out_shape.dims().end() - 1));
        target_dtype = DType::i32;
      }
      int y = g.input(prefix + "target", target_shape, target_dtype);
      c->y.push_back(y);
      if (weight < 0 && out_mask < 0)  // a program without weights or mask keeps the fused losses
        losses.push_back(emit_loss(g, loss, c->outputs[j], y, prefix + "loss"));
      else
        losses.push_back(emit_weighted_loss(g, loss, c->outputs[j], y, out_mask, weight, prefix + "loss"));
      if (multi) c->logs.emplace_back(prefix + "loss", losses.back());
      for (const Metric& m : model_.metrics()) {
        auto [metric_value, stat] = out_mask < 0
                                        ? emit_metric(g, m, loss, c->outputs[j], y, prefix + m.name)
                                        : emit_masked_metric(g, m, loss, c->outputs[j], y, out_mask, prefix + m.name);
        metric_logs.emplace_back(prefix + m.name, metric_value);
        metric_stats.push_back(stat);
      }
    }
    if (weight >= 0) c->y.push_back(weight);
    for (int& p : penalties)  // shaped as the compiled loss
      if (g[p].shape != g[losses[0]].shape) {
        graph::Attrs at;
        at.shape = g[losses[0]].shape;
        p = g.add(Op::Reshape, {p}, at, g[p].name);
      }
    losses.insert(losses.end(), penalties.begin(), penalties.end());  // differentiated with the compiled loss
    int total = losses.size() == 1 ? losses[0] : g.add(Op::Add, losses, {}, "loss");
    c->logs.insert(c->logs.begin(), {"loss", total});
    c->logs.insert(c->logs.end(), metric_logs.begin(), metric_logs.end());
    c->log_stats.assign(c->logs.size() - metric_logs.size(), LogStat{});  // the losses: batch means
    c->log_stats.insert(c->log_stats.end(), metric_stats.begin(), metric_stats.end());
    keep.clear();
    for (auto& [name, id] : c->logs) keep.push_back(id);

    if (kind == ProgramKind::train || kind == ProgramKind::accumulate) {
      std::vector<Weight*> weights = trainable_weights();
      std::vector<int> vars;
      for (Weight* w : weights) vars.push_back(ctx.raw_variable(*w));
      graph::RematStats local;
      int seed = -1;  // loss scaling: the backward pass starts from the current scale instead of 1
      if (enable_loss_scaling()) {
        graph::Attrs first;
        first.begin = 0, first.size = 1;
        graph::Attrs scalar;
        scalar.shape = Shape{};
        seed =
            g.add(Op::Reshape,
                  {g.add(Op::Slice, {state_->loss_scale_variable(g, allocate_slots)}, first, "optimizer/loss_scale")},
                  scalar, "optimizer/loss_scale");
      }
      std::vector<int> grads = graph::gradients(g, losses, vars, remat ? (stats ? stats : &local) : nullptr, seed);
      if (kind == ProgramKind::train)  // data parallel: the gradients summed over the replicas, in buckets
        grads = all_reduce(g, grads, weights, false);
      const int control = kind == ProgramKind::train ? step_control(g, grads, allocate_slots) : -1;
      for (size_t i = 0; i < weights.size(); ++i) {
        if (grads[i] < 0) continue;  // does not influence the loss
        if (kind == ProgramKind::train) {
          add_update(g, *weights[i], vars[i], grads[i], false, allocate_slots, control, sinks);
        } else {  // micro-batching: add this micro-batch's share of the gradient into the accumulator
          sinks.push_back(g.add(Op::AccumulateGrad, {state_->accumulator(g, *weights[i], allocate_slots), grads[i]}, {},
                                weights[i]->name + "/accumulate"));
          state_->reaches(*weights[i]);
        }
      }
      sinks.insert(sinks.end(), ctx.sinks.begin(), ctx.sinks.end());
    }
  }
  fuse_input_scaling(g, *c, keep);
  if (fuse && graph::fusion_enabled()) {
    std::vector<int> roots = keep;
    roots.insert(roots.end(), sinks.begin(), sinks.end());
    graph::fuse_epilogues(g, roots, keep);
    sinks = graph::group_updates(g, sinks);
    graph::alias_reshapes(g);
  }
  traced.keep = std::move(keep);
  traced.sinks = std::move(sinks);
  return traced;
}

}  // namespace tk::nn
