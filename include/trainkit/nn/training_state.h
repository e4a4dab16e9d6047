// The state a fit can be resumed from, bit for bit: weights, optimizer state, counters and the position in
// the data (which epoch, how many of its batches, the shuffle stream). BackupAndRestore saves and restores it;
// io/training_state_file.h writes it as one file.
//
//   tk::TrainingState s = model.training_state();     // after (or during, from a callback) fit
//   ...                                               // a new process builds and compiles the same model
//   model.restore_training_state(s);                   // the next fit continues at s.epoch, batch s.batch
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk {

// Where a fit is in its data. For fit(x, y): the shuffle stream's seed and how many shuffles it has made
// (one per epoch started). For fit(Dataset): the dataset pass the epoch reads and how many of its batches
// were consumed (a pass continues across epochs with steps_per_epoch).
struct FitPosition {
  int epoch = 0;              // the epoch in progress
  int64_t batch = 0;          // batches of that epoch already trained on
  uint64_t shuffle_seed = 0;  // fit(x, y)
  int64_t shuffles = 0;       // fit(x, y): epochs started so far (each reshuffles once)
  uint64_t data_pass = 0;     // fit(Dataset): the pass number the epoch's iterator was made with
  int64_t pass_offset = 0;    // fit(Dataset): batches of that pass consumed
  bool dataset = false;       // which of the two the position is for
};

struct TrainingState {
  std::string model_name;
  std::vector<std::string> weight_names;  // Model::get_weights() order
  std::vector<Tensor> weights;            // host float32 copies (training_state_view: the weights themselves)
  std::string optimizer;                  // Keras class name ("Adam"); empty before compile
  int slots_per_variable = 0;
  // Per trainable weight (in order), slots_per_variable each, then the optimizer's own variables (Nadam's u_product,
  // float32 scalars: Model::get_optimizer_variables); host copies (training_state_view: the slots themselves, on the
  // model's device).
  std::vector<Tensor> optimizer_slots;
  int64_t iterations = 0;                // optimizer steps taken
  float learning_rate = 0.0f;            // the optimizer's current learning rate (callbacks may have changed it)
  uint64_t step = 0;                     // the model's step counter (dropout's random stream)
  int threads = 0;                       // CPU threads the steps ran on (reductions are partitioned by it); 0: unknown
  std::string kernel_choices;            // CPU GEMM engine chosen per shape (backends/cpu/gemm.h), reused on resume
  std::string dtype_policy = "float32";  // Model::dtype_policy() (a restore into a model with another one is refused)
  // Dynamic loss scaling (LossScaleOptimizer): the scale the next step uses (0: no loss scaling), the finite steps
  // since it last changed, and the steps skipped so far (nn::ProgramCache::loss_scale_state()).
  float loss_scale = 0.0f;
  int64_t loss_scale_counter = 0;
  int64_t skipped_steps = 0;
  FitPosition position;
};

}  // namespace tk
