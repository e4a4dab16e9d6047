// BatchStager::stage_on_device: a batch of a device-resident Dataset (Dataset::on_device(arrays, cuda:N)) gathered on
// the program's device straight into its inputs (its backend's graph::RowGather; CUDA: a gather kernel), with the
// dtype conversion and fused Rescaling the host staging does (nn/training/batching.h). fit / evaluate / predict reach
// it with x, y = the source's whole arrays and idx = the batch's rows (nn/training/device_dataset.h).
#include <string>

#include "nn/training/staging.h"
#include "trainkit/core/error.h"

namespace tk::nn {

void BatchStager::stage_on_device(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y,
                                  const int64_t* idx, int64_t begin, int64_t n) {
  graph::Program& p = *c.program;
  const Device data = x[0].device();
  if (p.device() != data)
    throw InvalidArgument("the dataset's arrays are on " + data.to_string() + " (Dataset::on_device) but the program " +
                          "runs on " + p.device().to_string() + ": build the dataset with Dataset::on_device(arrays, " +
                          p.device().to_string() + "), or from host arrays");
  // The stream the program's kernels run on (its ProgramCache's compute stream; null, the legacy default stream, for
  // a program without one): the gather is ordered after the previous step and before this one on it.
  void* const stream = p.stream();
  if (!c.gather) {  // once per program
    c.gather = graph::backend(data.kind).make_row_gather(data);
    if (!c.gather)
      throw Unsupported("batches of a dataset on " + data.to_string() + " (Dataset::on_device): the " +
                        std::string(graph::backend(data.kind).name()) +
                        " backend cannot gather rows on its device; build the dataset from host arrays");
  }
  graph::RowGather& g = *c.gather;
  g.begin_batch(idx, begin, n, stream);
  const graph::InputAccess access;
  for (size_t i = 0; i < c.x.size(); ++i) {
    if (p.plan().offset[static_cast<size_t>(c.x[i])] < 0) continue;  // an input no output needs
    const graph::InputSlot slot = access.slot(p, c.x[i]);
    g.rows(x[i], slot.data, slot.dtype, c.x_scale[i].scale, c.x_scale[i].offset);
  }
  if (y)
    for (size_t j = 0; j < c.y.size(); ++j) {
      const graph::InputSlot slot = access.slot(p, c.y[j]);
      g.rows((*y)[j], slot.data, slot.dtype, 1.0f, 0.0f);
    }
}

}  // namespace tk::nn
