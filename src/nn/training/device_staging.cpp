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
  for_each_input(c, x, y, [&](const graph::InputSlot& slot, const Tensor& src, size_t, const StageScale& sc) {
    g.rows(src, slot.data, slot.dtype, sc.scale, sc.offset);
  });
}

}  // namespace tk::nn
