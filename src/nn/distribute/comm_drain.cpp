// drain_streams (comm_drain.h): plain C++, in every build.
#include "nn/distribute/comm_drain.h"

namespace tk::nn::distribute {

DrainOutcome drain_streams(size_t n, const std::function<StreamState(size_t)>& query, double timeout_s,
                           const std::function<double()>& now, const std::function<void()>& pause) {
  const double began = now();
  for (;;) {
    bool busy = false;
    for (size_t i = 0; i < n; ++i) {
      const StreamState s = query(i);
      if (s == StreamState::failed) return DrainOutcome::failed;
      busy = busy || s == StreamState::busy;
    }
    if (!busy) return DrainOutcome::drained;
    if (now() - began >= timeout_s) return DrainOutcome::timed_out;
    pause();
  }
}

}  // namespace tk::nn::distribute
