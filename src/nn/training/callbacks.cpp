#include "trainkit/nn/callbacks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {

constexpr auto kKey = &std::pair<std::string, double>::first;  // a log's name, for std::ranges::find

void Logs::set(const std::string& key, double value) {
  if (auto it = std::ranges::find(items_, key, kKey); it != items_.end())
    it->second = value;
  else
    items_.emplace_back(key, value);
}

double Logs::get(const std::string& key) const {
  if (auto it = std::ranges::find(items_, key, kKey); it != items_.end()) return it->second;
  std::string known;
  for (const auto& [k, v] : items_) known += (known.empty() ? "" : ", ") + k;
  throw InvalidArgument("no log named '" + key + "' (available: " + known + ")");
}

bool Logs::contains(const std::string& key) const { return std::ranges::find(items_, key, kKey) != items_.end(); }

bool Callback::is_chief() const { return !model || model->is_chief(); }

void History::on_epoch_end(int e, const Logs& logs) {
  epoch.push_back(e);
  for (const auto& [k, v] : logs.items()) history[k].push_back(v);
}

// ---------------------------------------------------------------- progress display
ProgbarLogger::ProgbarLogger(int verbose, bool terminal) : verbose_(verbose), terminal_(terminal) { line_[0] = 0; }

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Appends printf-formatted text to buf (capacity cap), never overflowing.
template <typename... A>
void append(char* buf, size_t cap, const char* fmt, A... args) {
  size_t used = std::strlen(buf);
  if (used + 1 < cap) std::snprintf(buf + used, cap - used, fmt, args...);
}

void append_duration(char* buf, size_t cap, double s) {
  if (s >= 3600)
    append(buf, cap, "%d:%02d:%02d", int(s) / 3600, (int(s) % 3600) / 60, int(s) % 60);
  else if (s >= 60)
    append(buf, cap, "%d:%02d", int(s) / 60, int(s) % 60);
  else
    append(buf, cap, "%.0fs", s);
}

void append_logs(char* buf, size_t cap, const Logs& logs, bool with_val) {
  for (const auto& [k, v] : logs.items()) {
    if (!with_val && k.rfind("val_", 0) == 0) continue;
    if (k.rfind("input_", 0) == 0) continue;                  // stall accounting: summarized at the end of the line
    if (k.rfind("allreduce_", 0) == 0) continue;              // data parallel: summarized at the end of the line
    if (k == "loss_scale" || k == "skipped_steps") continue;  // loss scaling: shown below once a step was skipped
    if (std::isnan(v))  // "nan" as Keras prints it (printf would keep a sign bit: "-nan")
      append(buf, cap, " - %s: nan", k.c_str());
    else if (std::abs(v) > 1e-3 || v == 0.0)
      append(buf, cap, " - %s: %.4f", k.c_str(), v);
    else
      append(buf, cap, " - %s: %.4e", k.c_str(), v);
  }
  if (logs.contains("skipped_steps") && logs.get("skipped_steps") > 0)
    append(buf, cap, " - skipped steps: %.0f (non-finite gradients; loss scale now %g)", logs.get("skipped_steps"),
           logs.contains("loss_scale") ? logs.get("loss_scale") : 0.0);
  if (with_val && logs.contains("allreduce_ms_per_step")) {  // the time blocked in all-reduces
    append(buf, cap, " - all-reduce: %.2f ms/step (%.1f%% of the step, ", logs.get("allreduce_ms_per_step"),
           logs.contains("allreduce_fraction") ? 100 * logs.get("allreduce_fraction") : 0.0);
    if (logs.contains("allreduce_overlap"))  // started early: the share of their span that other work hid
      append(buf, cap, "%.0f%% overlapped)", 100 * logs.get("allreduce_overlap"));
    else
      append(buf, cap, "not overlapped)");
  }
  if (with_val && logs.contains("input_wait_fraction")) {
    const double f = logs.get("input_wait_fraction");
    append(buf, cap, " - input wait: %.1f%% (%s)", f * 100,
           f < 0.05   ? "not input-bound"
           : f < 0.20 ? "moderately input-bound"
                      : "highly input-bound");
  }
}
}  // namespace

void ProgbarLogger::on_epoch_begin(int epoch, const Logs&) {
  start_ = last_draw_ = Clock::now();
  seen_ = 0;
  if (verbose_ > 0) {
    std::printf("Epoch %d/%d\n", epoch + 1, params.epochs);
    std::fflush(stdout);
  }
}

void ProgbarLogger::on_train_batch_end(int64_t batch, const Logs& logs) {
  seen_ = batch + 1;
  // Redraw at most every 50 ms (as Keras) so that printing never slows training.
  if (verbose_ != 1 || !terminal_ || seconds_since(last_draw_) < 0.05) return;
  last_draw_ = Clock::now();
  draw(seen_, logs, false, false);
}

void ProgbarLogger::on_epoch_end(int, const Logs& logs) {
  if (verbose_ <= 0) return;
  draw(seen_, logs, true, true);
}

void ProgbarLogger::draw(int64_t done, const Logs& logs, bool final_line, bool with_val) {
  const int64_t target = params.steps;
  const double elapsed = seconds_since(start_);
  const double per_step = done > 0 ? elapsed / static_cast<double>(done) : 0.0;
  const int digits = target > 0 ? static_cast<int>(std::log10(static_cast<double>(target))) + 1 : 1;
  line_[0] = 0;
  const size_t cap = sizeof(line_);
  if (verbose_ == 1) {
    constexpr int kWidth = 30;
    const int filled = target > 0 ? static_cast<int>(kWidth * done / target) : kWidth;
    char bar[kWidth + 3];
    int p = 0;
    bar[p++] = '[';
    for (int i = 0; i < kWidth; ++i)
      bar[p++] = i < filled - 1    ? '='
                 : i == filled - 1 ? (done < target ? '>' : '=')
                                   : (i == 0 && filled == 0 ? '>' : '.');
    bar[p++] = ']';
    bar[p] = 0;
    if (target > 0)
      append(line_, cap, "\r%*lld/%lld %s - ", digits, static_cast<long long>(done), static_cast<long long>(target),
             bar);
    else  // a dataset of unknown length, first epoch (Keras prints "Unknown")
      append(line_, cap, "\r%lld/Unknown - ", static_cast<long long>(done));
    if (!final_line && target > 0) {
      append(line_, cap, "ETA: ");
      append_duration(line_, cap, per_step * static_cast<double>(target - done));
    } else if (final_line) {
      append_duration(line_, cap, elapsed);
      if (per_step >= 1)
        append(line_, cap, " %.0fs/step", per_step);
      else if (per_step >= 1e-3)
        append(line_, cap, " %.0fms/step", per_step * 1e3);
      else
        append(line_, cap, " %.0fus/step", per_step * 1e6);
    }
    append_logs(line_, cap, logs, with_val);
    if (terminal_) append(line_, cap, "\033[K");  // clear what a longer previous line left
    if (final_line) append(line_, cap, "\n");
    if (!terminal_) {  // no carriage returns in logs and pipes
      if (!final_line) return;
      std::memmove(line_, line_ + 1, std::strlen(line_));
    }
  } else {
    if (target > 0)
      append(line_, cap, "%lld/%lld - ", static_cast<long long>(done), static_cast<long long>(target));
    else
      append(line_, cap, "%lld/Unknown - ", static_cast<long long>(done));
    append_duration(line_, cap, elapsed);
    append_logs(line_, cap, logs, with_val);
    if (per_step >= 1e-3)
      append(line_, cap, " - %.0fms/step\n", per_step * 1e3);
    else
      append(line_, cap, " - %.0fus/step\n", per_step * 1e6);
  }
  std::fputs(line_, stdout);
  std::fflush(stdout);
}

}  // namespace tk
