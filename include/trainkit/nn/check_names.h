// Checks a loss or a metric before compile (the CLI's --loss and --metrics): compile() runs the same checks.
//
//   tk::losses::check(tk::Loss("huber"));       // throws tk::InvalidArgument listing the known names otherwise
//   tk::metrics::check(tk::Metric("auc"));
#pragma once
#include "trainkit/nn/losses.h"
#include "trainkit/nn/metrics.h"

namespace tk {
namespace losses {
// Throws tk::InvalidArgument naming the known losses when the name is not one, or an option the loss does not have.
void check(const Loss& loss);
}  // namespace losses
namespace metrics {
// Throws tk::InvalidArgument naming the known metrics when the name is not one, or an option out of range.
void check(const Metric& metric);
}  // namespace metrics
}  // namespace tk
