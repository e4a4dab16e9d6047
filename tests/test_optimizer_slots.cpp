// The fused optimizers hold exactly the slots Keras makes for their hyperparameters (nn::Slot::in_keras,
// graph::update_slot_mask): SGD without momentum none, RMSprop without momentum and not centered only its velocity.
// The memory plan, the live state, .keras files and the kernels' numerics all agree (docs/memory.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backends/math/optimizers.h"
#include "graph/fuse.h"
#include "graph/program.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "nn/optimizer_rule.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
namespace fs = std::filesystem;

std::unique_ptr<Model> mlp() {
  return std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({64}), layers::Dense(256, "relu"),
                                                            layers::Dense(128, "relu"), layers::Dense(10)});
}

struct SlotCase {
  std::string name;
  std::function<OptimizerPtr()> make;
  std::vector<std::string> slots;  // Keras' variables per weight, in trainkit's order
};

const std::vector<SlotCase>& cases() {
  static const std::vector<SlotCase> c{
      {"SGD()", [] { return optimizers::SGD(); }, {}},
      {"SGD(momentum=0.9)", [] { return optimizers::SGD({.momentum = 0.9f}); }, {"momentum"}},
      {"SGD(momentum=0.9, nesterov)",
       [] { return optimizers::SGD({.momentum = 0.9f, .nesterov = true}); },
       {"momentum"}},
      {"RMSprop()", [] { return optimizers::RMSprop(); }, {"velocity"}},
      {"RMSprop(momentum=0.5)", [] { return optimizers::RMSprop({.momentum = 0.5f}); }, {"velocity", "momentum"}},
      {"RMSprop(centered)", [] { return optimizers::RMSprop({.centered = true}); }, {"velocity", "average_gradient"}},
      {"RMSprop(momentum=0.5, centered)",
       [] { return optimizers::RMSprop({.momentum = 0.5f, .centered = true}); },
       {"velocity", "momentum", "average_gradient"}},
      {"Adam()", [] { return optimizers::Adam(); }, {"momentum", "velocity"}},
  };
  return c;
}

// The plan's optimizer state is the held slots, one 256-aligned weight-sized buffer each, to the byte.
TEST(OptimizerSlots, ThePlanHoldsOnlyTheSlotsKerasMakes) {
  for (const SlotCase& c : cases()) {
    std::unique_ptr<Model> m = mlp();
    m->compile(c.make(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    size_t weights = 0;  // the trainable weights, each 256-aligned as the plan counts it
    for (const Weight* w : m->trainable_weights()) weights += (w->value.nbytes() + 255) / 256 * 256;
    ASSERT_GT(weights, 0u);
    EXPECT_EQ(m->optimizer()->slots_per_variable(), static_cast<int>(c.slots.size())) << c.name;
    for (size_t s = 0; s < c.slots.size(); ++s)
      EXPECT_EQ(nn::held_slot(*m->optimizer(), static_cast<int>(s)).name, c.slots[s]) << c.name;
    EXPECT_EQ(m->memory_plan(64).optimizer_state, c.slots.size() * weights) << c.name;
  }
}

// Training allocates what the plan says (docs/memory.md: "they agree to the byte"), and the live state per weight is
// the held slots.
TEST(OptimizerSlots, MeasuredPeakEqualsThePlan) {
  const int64_t batch = 32;
  Tensor x = Tensor::full({batch, 64}, 0.5f);
  Tensor y(Shape{batch}, DType::i32);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  for (const SlotCase& c : cases()) {
    const size_t baseline = config::get_memory_info().current;
    config::reset_peak_memory();
    {
      std::unique_ptr<Model> m = mlp();
      m->compile(c.make(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
      m->train_on_batch({x}, {y});
      const size_t measured = config::get_memory_info().peak - baseline;
      const MemoryPlan plan = m->memory_plan(batch);
      EXPECT_EQ(measured, plan.total) << c.name << "\n" << plan.to_string();
      for (const std::vector<Tensor>& slots : m->get_optimizer_slots()) EXPECT_EQ(slots.size(), c.slots.size());
    }
    EXPECT_EQ(config::get_memory_info().current, baseline) << c.name;
  }
}

// SGD() and RMSprop() without their unused slots step bit for bit as the shared per-element math
// (backends/math/optimizers.h), which the kernels ran when they still took those slots: one update per variable and
// the grouped MultiUpdate (the fusion pass), with a variable large enough to be split between threads.
TEST(OptimizerSlots, DefaultSgdAndRmspropStepAsTheSharedMathBitForBit) {
  const std::vector<Shape> shapes{{3, 4}, {5}, {70001}};
  for (const graph::Op rule : {graph::Op::SgdUpdate, graph::Op::RmspropUpdate})
    for (const bool grouped : {false, true}) {
      graph::UpdateConfig cfg;  // Keras' defaults: momentum 0, not centered
      cfg.update_op = rule;
      cfg.rho = 0.9f;
      const int slots = graph::update_slot_count(rule, cfg);
      ASSERT_EQ(slots, rule == graph::Op::SgdUpdate ? 0 : 1);
      std::vector<Tensor> w, g, vel;
      for (size_t v = 0; v < shapes.size(); ++v) {
        w.push_back(Tensor::zeros(shapes[v]));
        g.push_back(Tensor::zeros(shapes[v]));
        vel.push_back(Tensor::zeros(shapes[v]));
        for (int64_t i = 0; i < w[v].numel(); ++i) {
          w[v].data<float>()[i] = 0.5f - 0.001f * static_cast<float>((i * 7 + static_cast<int64_t>(v)) % 997);
          g[v].data<float>()[i] = 0.3f - 0.0007f * static_cast<float>((i * 13 + 3) % 1009);
          vel[v].data<float>()[i] = 0.01f * static_cast<float>(i % 17);
        }
      }
      // Expected: the math on host copies, the unused slots as the old kernels passed them (a scratch value).
      std::vector<Tensor> want_w, want_vel;
      const float lr = 0.01f;
      for (size_t v = 0; v < shapes.size(); ++v) {
        want_w.push_back(w[v].clone());
        want_vel.push_back(vel[v].clone());
        float* ww = want_w[v].data<float>();
        float* wv = want_vel[v].data<float>();
        const float* gg = g[v].data<float>();
        for (int64_t i = 0; i < w[v].numel(); ++i) {
          const float gi = math::GradFactor{1.0f, 0.0f}(gg[i]);
          if (rule == graph::Op::SgdUpdate) {
            math::sgd(ww[i], gi, lr);
          } else {
            float mom = 0.0f, avg = 0.0f;
            math::rmsprop(ww[i], wv[i], mom, avg, gi, lr, cfg.rho, cfg.epsilon, 0.0f, false);
          }
        }
      }
      graph::Graph gr;
      graph::Attrs at;
      at.update = &cfg;
      std::vector<int> sinks;
      for (size_t v = 0; v < shapes.size(); ++v) {
        std::vector<int> in{gr.variable("l" + std::to_string(v) + "/w", w[v]),
                            gr.variable("l" + std::to_string(v) + "/g", g[v])};
        if (slots == 1) in.push_back(gr.variable("l" + std::to_string(v) + "/slot0", vel[v]));
        sinks.push_back(gr.add(rule, in, at, "l" + std::to_string(v) + "/update"));
      }
      if (grouped) {  // one layer: the three updates become one MultiUpdate
        for (size_t v = 0; v < shapes.size(); ++v) {
          gr[gr[sinks[v]].inputs[0]].name = "dense/w" + std::to_string(v);
        }
        sinks = graph::group_updates(gr, sinks);
        ASSERT_EQ(sinks.size(), 1u);
        ASSERT_EQ(gr[sinks[0]].op, graph::Op::MultiUpdate);
      }
      graph::Program p(std::move(gr), {}, sinks, Device::cpu());
      graph::ExecContext ctx;
      ctx.scalars.learning_rate = lr;
      p.run(ctx);
      for (size_t v = 0; v < shapes.size(); ++v) {
        EXPECT_EQ(std::memcmp(w[v].raw(), want_w[v].raw(), w[v].nbytes()), 0)
            << graph::op_name(rule) << (grouped ? " grouped" : "") << " variable " << v;
        if (slots == 1) EXPECT_EQ(std::memcmp(vel[v].raw(), want_vel[v].raw(), vel[v].nbytes()), 0) << v;
      }
    }
}

// An update op built with the slots of one config refuses another (a slot it has no memory for), and a node with the
// wrong number of slots is a shape error naming what it takes.
TEST(OptimizerSlots, UpdateOpsTakeExactlyTheSlotsTheirConfigUses) {
  graph::UpdateConfig cfg;  // momentum 0: no slot
  Tensor w = Tensor::zeros({4}), g = Tensor::zeros({4}), m = Tensor::zeros({4});
  graph::Graph gr;
  graph::Attrs at;
  at.update = &cfg;
  const int vw = gr.variable("w", w), vg = gr.variable("g", g), vm = gr.variable("m", m);
  try {
    gr.add(graph::Op::SgdUpdate, {vw, vg, vm}, at, "w/update");
    ADD_FAILURE() << "SgdUpdate without momentum took a momentum slot";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0 slot(s)"), std::string::npos) << e.what();
  }
  const int u = gr.add(graph::Op::SgdUpdate, {vw, vg}, at, "w/update");
  graph::Program p(std::move(gr), {}, {u}, Device::cpu());
  graph::ExecContext ctx;
  ctx.scalars.learning_rate = 0.1f;
  p.run(ctx);
  cfg.momentum = 0.9f;  // the shared config changed after the program was built: no memory for the momentum
  EXPECT_THROW(p.run(ctx), Error);
}

// The number of optimizer datasets of a .keras file (iterations and learning rate included).
size_t optimizer_datasets(const std::string& path) {
  const io::keras::Archive a = io::keras::read_archive(path);
  const io::H5Tree t = io::read_h5_tree_image(path, a.weights.data(), a.weights.size());
  size_t n = 0;
  for (const auto& [name, tensor] : t.datasets) n += name.rfind("optimizer", 0) == 0 ? 1 : 0;
  return n;
}

// A Keras file compiled with SGD() (momentum 0) has no momentum variables: trainkit reads one and writes it back the
// same way (iterations and learning rate only); a model trained with SGD() saves, loads and trains on from where it
// stopped.
TEST(OptimizerSlots, KerasFilesOfSgdWithoutMomentumRoundTrip) {
  const fs::path dir = fs::temp_directory_path() / ("tk_optimizer_slots_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string keras_file = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/nested/sequential_base.keras";
  ASSERT_EQ(optimizer_datasets(keras_file), 2u);
  {
    std::unique_ptr<Model> k = models::load_model(keras_file);
    ASSERT_EQ(k->optimizer()->name(), "SGD");
    EXPECT_EQ(k->optimizer()->slots_per_variable(), 0);
    k->save((dir / "keras_back.keras").string());
    EXPECT_EQ(optimizer_datasets((dir / "keras_back.keras").string()), 2u);
  }
  const int64_t batch = 8;
  Tensor x = Tensor::full({batch, 64}, 0.25f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i % 37);
  Tensor y(Shape{batch}, DType::i32);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  std::unique_ptr<Model> m = mlp();
  m->compile(optimizers::SGD({.learning_rate = 0.1f}), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  m->train_on_batch({x}, {y});
  const std::string path = (dir / "sgd.keras").string();
  m->save(path);
  EXPECT_EQ(optimizer_datasets(path), 2u);
  std::unique_ptr<Model> back = models::load_model(path);
  EXPECT_EQ(back->optimizer()->slots_per_variable(), 0);
  EXPECT_EQ(back->optimizer()->iterations(), 1);
  m->train_on_batch({x}, {y});
  back->train_on_batch({x}, {y});
  const std::vector<const Weight*> a = m->trainable_weights(), b = back->trainable_weights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(std::memcmp(a[k]->value.raw(), b[k]->value.raw(), a[k]->value.nbytes()), 0) << a[k]->name;
  fs::remove_all(dir);
}

// A training state holds the held slots; one written when trainkit still kept every slot of the rule (SGD's unused
// momentum) restores too, its unused slots dropped.
TEST(OptimizerSlots, TrainingStatesHoldTheHeldSlotsAndReadOldOnes) {
  const int64_t batch = 8;
  Tensor x = Tensor::full({batch, 64}, 0.25f);
  Tensor y(Shape{batch}, DType::i32);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  for (const SlotCase& c : {cases()[0], cases()[3]}) {  // SGD(), RMSprop()
    std::unique_ptr<Model> m = mlp();
    m->compile(c.make(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    m->train_on_batch({x}, {y});
    TrainingState s = m->training_state();
    EXPECT_EQ(s.slots_per_variable, static_cast<int>(c.slots.size())) << c.name;
    const size_t n = m->trainable_weights().size();
    EXPECT_EQ(s.optimizer_slots.size(), n * c.slots.size()) << c.name;
    // The old layout: every rule slot per variable, the unused ones zeros after the held ones' places.
    const nn::RuleState& rule = nn::rule_state(*m->optimizer());
    TrainingState old = s;
    old.slots_per_variable = static_cast<int>(rule.rule->slots.size());
    old.optimizer_slots.clear();
    const std::vector<const Weight*> tw = m->trainable_weights();
    for (size_t k = 0; k < n; ++k)
      for (size_t r = 0; r < rule.rule->slots.size(); ++r) {
        const auto held = std::find(rule.held.begin(), rule.held.end(), r);
        old.optimizer_slots.push_back(held != rule.held.end()
                                          ? s.optimizer_slots[k * c.slots.size() + (held - rule.held.begin())]
                                          : Tensor::zeros(tw[k]->value.shape()));
      }
    std::unique_ptr<Model> fresh = mlp(), from_old = mlp();
    for (Model* r : {fresh.get(), from_old.get()})
      r->compile(c.make(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    fresh->restore_training_state(s);
    from_old->restore_training_state(old);
    for (Model* r : {m.get(), fresh.get(), from_old.get()}) r->train_on_batch({x}, {y});
    for (Model* r : {fresh.get(), from_old.get()}) {
      const std::vector<const Weight*> a = m->trainable_weights(), b = r->trainable_weights();
      for (size_t k = 0; k < a.size(); ++k)
        EXPECT_EQ(std::memcmp(a[k]->value.raw(), b[k]->value.raw(), a[k]->value.nbytes()), 0) << c.name;
    }
  }
}

}  // namespace
}  // namespace tk
