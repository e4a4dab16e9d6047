// Runs under mpirun (tests/distribute/mpi_tests.sh): MultiWorkerMirroredStrategy against one device, and the ways
// a job fails. Modes:
//   equal mlp|cnn|bn STEPS [STRICT [MICRO]]  every rank trains STEPS steps of 128 rows (bn: then one of 2 rows);
//                         rank 0 then trains one device on the same global batches and compares the weights after
//                         every step (max|d|/max|w| per tensor, within 1e-5 for the first STRICT steps, all by
//                         default; every step is printed). bn: Dense, synchronized BatchNormalization, relu, Dense
//   mismatch              rank 1 builds a different model: every rank must stop with one clear error, exit 3
//   mismatch_sync bn      rank 1's BatchNormalization is not synchronized (the same weights): the same error
//   stall | kill          rank 1 stops itself (SIGSTOP) or dies (SIGKILL) at step 3: the others must not hang
//   evaluate mlp ROWS     every rank builds the model from its own seed, then evaluates ROWS rows (arrays, then a
//                         Dataset) split over the ranks: each must return what rank 0's model gives in one process
//   predict mlp ROWS      the same for predict over ROWS rows in batches of 100: every rank must hold every row of
//                         what rank 0's model predicts in one process, and have run only its batches
//   data_mismatch mlp ROWS predict and evaluate over arrays whose values differ on rank 1: both refused on every rank
//   predict_fail mlp ROWS rank 1 (given a small TK_MEMORY_LIMIT) fails building its predict program: the job must end
//                         at once with rank 1's error
//   auto_batch mlp ROWS   fit with batch_size = kAutoBatchSize on ROWS rows, each rank under its own budget
//                         (TK_MEMORY_LIMIT set per rank by the script): every rank prints the largest batch (up to
//                         ROWS / ranks) one device of its budget trains alone, then the global batch fit chose and the
//                         steps it ran; the script checks that both are ranks x the smaller of the two
//   dataset mlp ROWS EPOCHS [off]  fit over shuffle -> map -> batch(128) of ROWS rows: rank 0 compares the weights
//                         after every step with one device on the same pipeline (within 1e-5), and every rank checks
//                         its steps and how many elements its map decoded: its rows of each global batch (auto shard),
//                         or every row (off: AutoShardPolicy::OFF through with_options)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "nn/distribute/strategy_state.h"
#include "test_data.h"
#include "trainkit/trainkit.h"

namespace {

struct Recorder : tk::Callback {
  std::vector<std::vector<tk::Tensor>> after_step;
  std::string fault;
  int rank = 0;
  void on_train_batch_end(int64_t batch, const tk::Logs&) override {
    after_step.push_back(model->get_weights());
    if (batch == 2 && rank == 1 && fault == "stall") std::raise(SIGSTOP);
    if (batch == 2 && rank == 1 && fault == "kill") std::raise(SIGKILL);
  }
};

bool g_bn_synchronized = true;  // mismatch_sync: rank 1's BatchNormalization is not synchronized

std::unique_ptr<tk::Model> make(const std::string& model, int units) {
  if (model == "cnn") return tk::models::tutorial_cnn();
  if (model == "bn")  // synchronized BatchNormalization: the global batch's statistics on every rank
    return std::make_unique<tk::Sequential>(
        std::vector<tk::LayerPtr>{tk::layers::Input({784}), tk::layers::Dense(units, "linear", {.use_bias = false}),
                                  tk::layers::BatchNormalization({.synchronized = g_bn_synchronized}),
                                  tk::layers::Activation("relu"), tk::layers::Dense(10)});
  return std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{tk::layers::Input({784}), tk::layers::Dense(256, "relu"),
                                tk::layers::Dense(units, "relu"), tk::layers::Dense(10)});
}

std::vector<std::vector<tk::Tensor>> train(const std::string& model, int64_t steps,
                                           tk::distribute::MultiWorkerMirroredStrategy* s, int units,
                                           const std::string& fault, int rank, int64_t micro) {
  const int64_t n = steps * 128 + (model == "bn" ? 2 : 0);  // bn: a last step of 2 rows (on 3 ranks one has none)
  const tk::Tensor x = model == "cnn" ? tk::testing::uniform({n, 28, 28}, 3) : tk::testing::uniform({n, 784}, 1);
  const tk::Tensor y = tk::testing::int_labels(n, 10, 2);
  tk::utils::set_random_seed(7);
  std::unique_ptr<tk::Model> m = make(model, units);
  tk::distribute::in_scope(
      s, [&] { m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true})); });
  auto rec = std::make_shared<Recorder>();
  rec->fault = fault;
  rec->rank = rank;
  m->fit(x, y, {.batch_size = 128, .verbose = 0, .callbacks = {rec}, .seed = 11, .micro_batch_size = micro});
  return rec->after_step;
}

// Distributed evaluate: batch k on rank k % ranks, logs summed over the ranks, rank 0's weights everywhere (each rank
// built its model from its own seed). Every rank compares with rank 0's model evaluated alone (seed 7, no strategy).
int evaluate(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows) {
  const tk::Tensor x = tk::testing::uniform({rows, 784}, 1);
  const tk::Tensor y = tk::testing::int_labels(rows, 10, 2);
  auto build = [&](uint64_t seed, tk::distribute::MultiWorkerMirroredStrategy* strategy) {
    tk::utils::set_random_seed(seed);
    std::unique_ptr<tk::Model> m = make("mlp", 128);
    tk::distribute::in_scope(strategy, [&] {
      m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    });
    return m;
  };
  std::unique_ptr<tk::Model> alone = build(7, nullptr), spread = build(7 + static_cast<uint64_t>(s.rank()), &s);
  const tk::data::Dataset ds = tk::data::Dataset::from_tensor_slices({x, y}).batch(100);
  const tk::Logs want = alone->evaluate(x, y, {.batch_size = 100, .verbose = 0});
  const tk::Logs got = spread->evaluate(x, y, {.batch_size = 100, .verbose = 0});
  const tk::Logs got_ds = spread->evaluate(ds, {.verbose = 0});
  int bad = 0;
  for (const char* k : {"loss", "accuracy"}) {
    const double w = want.get(k), g = got.get(k), d = got_ds.get(k);
    std::printf("rank %d: %s alone %.9g, over %d ranks: arrays %.9g, dataset %.9g\n", s.rank(), k, w,
                s.num_replicas_in_sync(), g, d);
    bad +=
        std::fabs(g - w) > 1e-6 * std::max(1.0, std::fabs(w)) || std::fabs(d - w) > 1e-6 * std::max(1.0, std::fabs(w));
  }
  return bad ? 1 : 0;
}

// Distributed predict: batch k on rank k % ranks, then every rank holds every row (arrays, then a Dataset). Each rank
// built its model from its own seed (rank 0's weights are taken before the first batch); every rank compares its
// outputs with rank 0's model predicting alone (seed 7, no strategy), within 1e-6 of the largest output (printed:
// bit-equal here), and counts the batches it ran itself.
int predict(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows) {
  const tk::Tensor x = tk::testing::uniform({rows, 784}, 1);
  auto build = [&](uint64_t seed, tk::distribute::MultiWorkerMirroredStrategy* strategy) {
    tk::utils::set_random_seed(seed);
    std::unique_ptr<tk::Model> m = make("mlp", 128);
    tk::distribute::in_scope(strategy, [&] {
      m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    });
    return m;
  };
  std::unique_ptr<tk::Model> alone = build(7, nullptr), spread = build(7 + static_cast<uint64_t>(s.rank()), &s);
  const int64_t batch = 100, batches = (rows + batch - 1) / batch;
  const tk::Tensor want = alone->predict(x, batch);
  const std::vector<int64_t>& ran = s.state()->inference_batches;
  const tk::Tensor got = spread->predict(x, batch);
  const int64_t ran_arrays = ran.empty() ? 0 : ran[0];
  const std::vector<tk::Tensor> got_ds = spread->predict(tk::data::Dataset::from_tensor_slices({x}).batch(batch));
  const int64_t ran_dataset = (ran.empty() ? 0 : ran[0]) - ran_arrays;
  int64_t mine = 0;  // batches k with k % ranks == rank
  for (int64_t k = s.rank(); k < batches; k += s.num_replicas_in_sync()) ++mine;
  int bad = 0;
  for (const auto& [what, t] : {std::pair<const char*, const tk::Tensor*>{"arrays", &got}, {"dataset", &got_ds[0]}}) {
    double diff = t->shape() == want.shape() ? 0.0 : 1e9, scale = 0;
    for (int64_t i = 0; diff < 1e9 && i < want.numel(); ++i) {
      diff = std::max(diff, double(std::fabs(want.data<float>()[i] - t->data<float>()[i])));
      scale = std::max(scale, double(std::fabs(want.data<float>()[i])));
    }
    const bool bits = diff == 0.0;
    std::printf("rank %d: predict (%s) over %d ranks: %s rows, max|d|/max|y| = %.3g%s\n", s.rank(), what,
                s.num_replicas_in_sync(), t->shape().to_string().c_str(), scale > 0 ? diff / scale : diff,
                bits ? " (bit-equal)" : "");
    bad += diff > 1e-6 * scale;
  }
  std::printf("rank %d: ran %lld batches (arrays) and %lld (dataset) of %lld; its share is %lld\n", s.rank(),
              static_cast<long long>(ran_arrays), static_cast<long long>(ran_dataset), static_cast<long long>(batches),
              static_cast<long long>(mine));
  bad += ran_arrays != mine || ran_dataset != mine;
  return bad ? 1 : 0;
}

// predict where rank 1 cannot build its program (its device budget, TK_MEMORY_LIMIT set for it alone by the script,
// holds the model and the data but not a program of 100 rows): rank 1 fails at its first batch and must end the job
// at once, naming itself, while rank 0 waits to gather (not until the collective timeout). Neither rank returns.
int predict_fail(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows) {
  const tk::Tensor x = tk::testing::uniform({rows, 784}, 1);
  tk::utils::set_random_seed(7);
  std::unique_ptr<tk::Model> m = make("mlp", 128);
  tk::distribute::in_scope(
      &s, [&] { m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true})); });
  m->predict(x, 100);
  std::printf("rank %d: predict returned\n", s.rank());
  return 0;
}

// predict and evaluate where rank 1 holds other values than rank 0 (the same shapes and row count): each rank would run
// its batches of its own arrays, and predict would hand every rank a mix of both. Both calls must throw on every rank,
// naming the data's contents; nothing may run.
int data_mismatch(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows) {
  const tk::Tensor x = tk::testing::uniform({rows, 784}, s.rank() == 1 ? 2 : 1);
  const tk::Tensor y = tk::testing::int_labels(rows, 10, 2);
  tk::utils::set_random_seed(7);
  std::unique_ptr<tk::Model> m = make("mlp", 128);
  tk::distribute::in_scope(
      &s, [&] { m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true})); });
  int refused = 0;
  for (const char* call : {"predict", "evaluate"}) {
    try {
      if (std::string(call) == "predict")
        m->predict(x, 100);
      else
        m->evaluate(x, y, {.batch_size = 100, .verbose = 0});
      std::printf("rank %d: %s returned\n", s.rank(), call);
    } catch (const tk::InvalidArgument& e) {
      std::printf("rank %d: %s error: %s\n", s.rank(), call, e.what());
      ++refused;
    }
  }
  return refused == 2 ? 3 : 0;
}

double worst_step_difference(const std::vector<std::vector<tk::Tensor>>& one,
                             const std::vector<std::vector<tk::Tensor>>& many, size_t strict);

// batch_size auto under per-rank budgets: the largest batch a single-device model fits on this rank alone, then the
// global batch the strategy's fit chooses (every rank the same: ranks x the smallest) and the steps it ran with it.
int auto_batch(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows) {
  const tk::Tensor x = tk::testing::uniform({rows, 784}, 1), y = tk::testing::int_labels(rows, 10, 2);
  const int64_t per_rank_cap = rows / s.num_replicas_in_sync();
  {
    std::unique_ptr<tk::Model> alone = make("mlp", 128);
    alone->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    std::printf(
        "rank %d: alone fits %lld\n", s.rank(),
        static_cast<long long>(alone->largest_batch_that_fits(alone->memory_available_for_training(), per_rank_cap)));
  }
  tk::utils::set_random_seed(7);
  std::unique_ptr<tk::Model> m = make("mlp", 128);
  tk::distribute::in_scope(
      &s, [&] { m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true})); });
  struct Steps : tk::Callback {
    int64_t steps = 0, ran = 0;
    void on_train_begin(const tk::Logs&) override { steps = params.steps; }
    void on_train_batch_end(int64_t, const tk::Logs&) override { ++ran; }
  };
  auto steps = std::make_shared<Steps>();
  // What fit's batch_size auto resolves to, asked first in the same state (after training the model's own arena
  // counts as available and the answer may grow). fit's own choice is in its line (rank 0) and in the check before
  // the first step, which stops the job when the ranks' global batches differ.
  const int64_t global = m->auto_batch_size(rows, false);
  const tk::History h = m->fit(
      x, y, {.batch_size = tk::kAutoBatchSize, .verbose = 2, .callbacks = {steps}, .seed = 11, .auto_batch_cap = rows});
  std::printf("rank %d: global batch %lld, %lld of %lld steps, loss %.4f\n", s.rank(), static_cast<long long>(global),
              static_cast<long long>(steps->ran), static_cast<long long>(steps->steps), h.history.at("loss")[0]);
  return steps->ran == (rows + global - 1) / global && std::isfinite(h.history.at("loss")[0]) ? 0 : 1;
}

// fit over a Dataset whose map counts the elements it decodes on this rank.
int dataset(tk::distribute::MultiWorkerMirroredStrategy& s, int64_t rows, int epochs, bool off) {
  const int64_t batch = 128;
  const tk::Tensor x = tk::testing::uniform({rows, 784}, 1);
  const tk::Tensor y = tk::testing::int_labels(rows, 10, 2);
  auto decoded = std::make_shared<std::atomic<int64_t>>(0);
  auto pipeline = [&] {
    tk::data::Dataset d = tk::data::Dataset::from_tensor_slices({x, y})
                              .shuffle(300, /*seed=*/5)
                              .map(
                                  [decoded](tk::data::Element e) {
                                    decoded->fetch_add(1);
                                    return e;
                                  },
                                  {.num_parallel_calls = 2})
                              .batch(batch)
                              .prefetch(2);
    return off ? d.with_options({.auto_shard_policy = tk::data::AutoShardPolicy::OFF}) : d;
  };
  auto run = [&](tk::distribute::MultiWorkerMirroredStrategy* strategy) {
    tk::utils::set_random_seed(7);
    std::unique_ptr<tk::Model> m = make("mlp", 128);
    tk::distribute::in_scope(strategy, [&] {
      m->compile(tk::optimizers::SGD(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    });
    auto rec = std::make_shared<Recorder>();
    m->fit(pipeline(), {.epochs = epochs, .verbose = 0, .callbacks = {rec}});
    return rec->after_step;
  };
  const auto many = run(&s);
  // What this rank should have decoded: its rows of every global batch, split as the step splits them.
  const int64_t ranks = s.num_replicas_in_sync(), steps = (rows + batch - 1) / batch * epochs;
  int64_t want = 0;
  for (int64_t k = 0; k < rows; k += batch) {
    const int64_t b = std::min(batch, rows - k), active = std::min(ranks, b);
    want += s.rank() >= active ? 1 : b / active + (s.rank() < b % active ? 1 : 0);
  }
  want = off ? rows * epochs : want * epochs;
  std::printf("rank %d: %zu steps (want %lld); the map decoded %lld elements of %lld (want %lld)\n", s.rank(),
              many.size(), static_cast<long long>(steps), static_cast<long long>(decoded->load()),
              static_cast<long long>(rows * epochs), static_cast<long long>(want));
  int bad = static_cast<int64_t>(many.size()) != steps || decoded->load() != want;
  if (s.rank() == 0) {
    const auto one = run(nullptr);
    const double worst = worst_step_difference(one, many, SIZE_MAX);
    std::printf("dataset%s, %lld ranks, %zu steps: worst per-tensor max|d|/max|w| = %.3g\n", off ? " (off)" : "",
                static_cast<long long>(ranks), one.size(), worst);
    bad += one.size() != many.size() || worst > 1e-5;
  }
  return bad ? 1 : 0;
}

// Per step: the largest per-tensor max|d|/max|w| between two runs' weights, printed; the worst of the first `strict`.
double worst_step_difference(const std::vector<std::vector<tk::Tensor>>& one,
                             const std::vector<std::vector<tk::Tensor>>& many, size_t strict) {
  double worst = 0;
  for (size_t s = 0; s < one.size() && s < many.size(); ++s) {
    double step_worst = 0;
    for (size_t t = 0; t < one[s].size(); ++t) {
      double d = 0, scale = 0;
      for (int64_t i = 0; i < one[s][t].numel(); ++i) {
        d = std::max(d, double(std::fabs(one[s][t].data<float>()[i] - many[s][t].data<float>()[i])));
        scale = std::max(scale, double(std::fabs(one[s][t].data<float>()[i])));
      }
      step_worst = std::max(step_worst, scale > 0 ? d / scale : d);
    }
    std::printf("step %zu: max|d|/max|w| = %.3g\n", s + 1, step_worst);
    if (s < strict) worst = std::max(worst, step_worst);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equal";
  const std::string model = argc > 2 ? argv[2] : "mlp";
  const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 20;
  const size_t strict = argc > 4 ? static_cast<size_t>(std::atoll(argv[4])) : SIZE_MAX;  // steps held to 1e-5
  const int64_t micro = argc > 5 ? std::atoll(argv[5]) : 0;                              // micro-batch size (0: off)
  tk::distribute::MultiWorkerMirroredStrategy strategy;
  const int rank = strategy.rank();
  std::printf("rank %d: %s\n", rank, strategy.describe().c_str());
  try {
    if (mode == "evaluate") return evaluate(strategy, steps);
    if (mode == "predict") return predict(strategy, steps);
    if (mode == "predict_fail") return predict_fail(strategy, steps);
    if (mode == "data_mismatch") return data_mismatch(strategy, steps);
    if (mode == "auto_batch") return auto_batch(strategy, steps);
    if (mode == "dataset")
      return dataset(strategy, steps, argc > 4 ? std::atoi(argv[4]) : 1, argc > 5 && std::string(argv[5]) == "off");
    const int units = mode == "mismatch" && rank == 1 ? 64 : 128;
    if (mode == "mismatch_sync" && rank == 1) g_bn_synchronized = false;
    const auto many = train(model, steps, &strategy, units, mode, rank, micro);
    if (mode != "equal" || rank != 0) return 0;
    const auto one = train(model, steps, nullptr, 128, "", 0, micro);
    const double worst = worst_step_difference(one, many, strict);
    std::printf("%s, %d ranks, %zu steps: worst per-tensor max|d|/max|w| = %.3g over the first %zu\n", model.c_str(),
                strategy.num_replicas_in_sync(), one.size(), worst, std::min(strict, one.size()));
    return one.size() == many.size() && worst <= 1e-5 ? 0 : 1;
  } catch (const tk::InvalidArgument& e) {
    std::printf("rank %d: error: %s\n", rank, e.what());
    return 3;
  }
}
