#include "graph/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/float_bytes.h"
#include "runtime/log.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/determinism.h"

namespace tk::graph {

InputSlot InputAccess::slot(Program& p, int value) const {
  const Node& n = p.g_[value];
  if (n.op != Op::Input) throw InvalidArgument("value '" + n.name + "' is not a program input");
  return InputSlot{p.storage(value), n.shape, n.dtype, p.device_};
}

Program::Program(Graph g, std::vector<int> outputs, std::vector<int> sinks, Device device, const std::string& owner,
                 bool own_arena)
    : g_(std::move(g)), device_(device), backend_(&backend(device.kind)), outputs_(outputs) {
  std::vector<int> roots = outputs;
  roots.insert(roots.end(), sinks.begin(), sinks.end());
  order_ = schedule(g_, roots);
  std::vector<int> keep = outputs;
  for (int id : order_)
    if (g_[id].op == Op::Input) keep.push_back(id);
  plan_ = plan_memory(g_, order_, keep, device);

  // Resolve every kernel now; run() only walks steps_.
  // A BiasGrad fused into its input's kernel (graph/fuse.h) has no step: that kernel writes it as a second output.
  // Neither has a View (graph/bucket.h): it is memory inside another value.
  std::vector<int> side(static_cast<size_t>(g_.size()), -1);  // per producer: its fused BiasGrad
  for (int id : order_)
    if (is_side_output(g_, id)) side[static_cast<size_t>(g_[id].inputs[0])] = id;
  // Between an overlapping AllReduce and its AllReduceWait the other kernels' steps give the collective a chance to
  // progress (Collective::progress: MPI moves a nonblocking collective on only inside MPI calls).
  Collective* in_flight = nullptr;
  int waits_left = 0;
  steps_.reserve(order_.size());
  for (int id : order_) {
    const Node& n = g_[id];
    if (n.op == Op::Input || n.op == Op::Variable || n.op == Op::View || is_side_output(g_, id)) continue;
    if (n.op == Op::AllReduce && n.attrs.overlap && n.attrs.collective) in_flight = n.attrs.collective, ++waits_left;
    if (n.op == Op::AllReduceWait && g_[n.inputs[0]].attrs.collective && --waits_left == 0) in_flight = nullptr;
    steps_.push_back(Step{find_kernel(device.kind, n.op, signature_of(g_, id)), id, nullptr, in_dtypes_.size(),
                          side[static_cast<size_t>(id)], nullptr, in_flight});
    for (int in : n.inputs) in_dtypes_.push_back(g_[in].dtype);
    // What capture depends on: decided once per program (a later enable_profiling turns it off in run()).
    has_collective_ = has_collective_ || n.attrs.collective || n.op == Op::AllReduce || n.op == Op::AllReduceWait;
    if (n.attrs.update && std::ranges::find(update_configs_, n.attrs.update) == update_configs_.end())
      update_configs_.push_back(n.attrs.update);
  }
  in_ptrs_.assign(in_dtypes_.size(), nullptr);
  step_seconds_.assign(steps_.size(), 0.0);
  if (own_arena) bind_arena(Tensor(Shape{static_cast<int64_t>(arena_bytes_required())}, DType::u8, device, owner));
  profiling_ = print_profile_ = runtime::setting_bool_or_default(runtime::Setting::profile);
  set_step_launcher(backend_->make_step_launcher(device));
}

void Program::set_step_launcher(std::unique_ptr<StepLauncher> launcher) {
  launcher_ = std::move(launcher);
  capture_ =
      StepCapture(capture_off_reason(launcher_ != nullptr, cuda_graphs_enabled_by_env(), profiling_, has_collective_));
}

void Program::set_stream(void* stream) {
  if (stream == stream_) return;
  synchronize();  // what was queued on the old stream is done before the new one reuses the arena
  stream_ = stream;
  if (capture_.invalidate() && launcher_) launcher_->reset();
}

ExecContext Program::own_context() const {
  ExecContext ctx;
  ctx.device = device_;
  ctx.stream = stream_;
  return ctx;
}

size_t Program::arena_bytes_required() const {
  return std::max(plan_.arena_bytes + plan_.workspace_bytes, kArenaAlignment);
}

void Program::bind_arena(Tensor arena) {
  // A captured graph holds the old arena's addresses: drop it (the next run captures again).
  if (capture_.invalidate() && launcher_) launcher_->reset();
  arena_ = std::move(arena);
  if (!arena_.defined()) return;
  if (arena_.nbytes() < arena_bytes_required())
    throw InvalidArgument("program arena of " + std::to_string(arena_.nbytes()) + " bytes is smaller than the " +
                          std::to_string(arena_bytes_required()) + " bytes planned");
  // Every pointer a kernel receives, resolved once per arena.
  for (Step& s : steps_) {
    const Node& n = g_[s.node];
    s.out = op_info(n.op).has_output ? storage(s.node) : nullptr;
    s.side_out = s.side >= 0 ? storage(s.side) : nullptr;
    for (size_t i = 0; i < n.inputs.size(); ++i) in_ptrs_[s.in_begin + i] = storage(n.inputs[i]);
  }
}

void* Program::storage(int value) const {
  const Node& n = g_[value];
  if (n.op == Op::Variable) return n.attrs.external;
  int64_t off = plan_.offset[static_cast<size_t>(value)];
  if (off < 0) throw InvalidArgument("value '" + n.name + "' has no storage in this program");
  if (!arena_.defined()) throw InvalidArgument("program has no arena bound (bind_arena)");
  return static_cast<std::byte*>(const_cast<void*>(arena_.raw())) + off;
}

void Program::run(const ExecContext& given) {
  if (!arena_.defined()) throw InvalidArgument("program has no arena bound (bind_arena)");
  if (given.device != device_)
    throw InvalidArgument("a program built for " + device_.to_string() + " was run with a context for " +
                          given.device.to_string());
  ExecContext ctx = given;
  if (stream_) ctx.stream = stream_;
  struct Mode {  // the thread's floating-point mode for kernels, and the caller's back afterwards
    Backend* b;
    uint64_t saved;
    ~Mode() { b->leave_run(saved); }
  } mode{backend_, backend_->enter_run()};
  // The workspace region after the arena: the kernels' scratch, then the step's scalars (kernels read them).
  void* workspace = static_cast<std::byte*>(arena_.raw()) + plan_.arena_bytes;
  auto* scalars =
      reinterpret_cast<StepScalars*>(static_cast<std::byte*>(workspace) + plan_.workspace_bytes - kStepScalarsBytes);
  if (launcher_)
    launcher_->upload_scalars(scalars, &ctx.scalars, sizeof(StepScalars), ctx.stream);
  else
    backend_->copy_to_device(scalars, &ctx.scalars, sizeof(StepScalars), ctx);
  if (profiling_ && capture_.state() != StepCapture::State::off) {  // enable_profiling after the program was built
    if (launcher_) launcher_->reset();
    capture_ = StepCapture(capture_off_reason(true, true, /*profiling=*/true, false));
  }
  // The legacy default stream (no stream of its own: the op harness, a program outside a ProgramCache) cannot be
  // captured: such runs stay plain and leave the capture state alone.
  if (!profiling_ && launcher_ && ctx.stream) return run_captured(ctx, workspace, scalars);
  run_steps(ctx, workspace, scalars);
}

void Program::run_steps(const ExecContext& ctx, void* workspace, const StepScalars* scalars) {
  auto args = [&](const Step& s) {
    return KernelArgs{g_,
                      g_[s.node],
                      s.out,
                      in_ptrs_.data() + s.in_begin,
                      ctx,
                      workspace,
                      in_dtypes_.data() + s.in_begin,
                      g_[s.node].dtype,
                      scalars,
                      s.side_out};
  };
  if (!profiling_) {
    for (const Step& s : steps_) {
      s.fn(args(s));
      if (s.poll) s.poll->progress();
    }
    return;
  }
  using Clock = std::chrono::steady_clock;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    const auto t0 = Clock::now();
    s.fn(args(s));
    backend_->synchronize(ctx);  // so the time is the kernel's, not its launch's
    step_seconds_[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    if (s.poll) s.poll->progress();
  }
  ++runs_;
}

// A device with graphs (CUDA): a plain warm-up run, then one capture, then replays (graph/step_capture.h). A capture
// that fails is logged once and the step runs plainly, now and from then on.
void Program::run_captured(const ExecContext& ctx, void* workspace, const StepScalars* scalars) {
  // What a graph would freeze besides the binding (graph/step_capture.h): the optimizer's hyperparameters as they are
  // now (a callback may change Optimizer::config()), op determinism, and this thread (its library handles).
  const HostKey key{host_values_key(update_configs_, config::is_op_determinism_enabled()), this_thread_key()};
  switch (capture_.next(arena_.raw(), ctx.stream, key)) {
    case StepCapture::Action::drop:
      launcher_->reset();
      [[fallthrough]];
    case StepCapture::Action::plain:
      run_steps(ctx, workspace, scalars);
      capture_.ran_plain();
      return;
    case StepCapture::Action::replay:
      launcher_->launch(ctx.stream);
      return;
    case StepCapture::Action::capture:
      break;
  }
  std::string why;
  try {
    launcher_->begin_capture(ctx.stream);
    try {
      run_steps(ctx, workspace, scalars);  // captured: nothing runs yet
    } catch (...) {
      launcher_->abort_capture(ctx.stream);
      throw;
    }
    launcher_->end_capture(ctx.stream);
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (why.empty()) {
    capture_.captured();
    launcher_->launch(ctx.stream);  // this step's work, captured but not yet run
    return;
  }
  launcher_->reset();
  if (capture_.failed(why) && runtime::log_enabled(runtime::LogSeverity::warning))
    std::fprintf(stderr,
                 "trainkit: W CUDA Graph capture of a program of %zu kernels on %s failed; it runs as plain kernel "
                 "launches from now on (set TK_CUDA_GRAPHS=0 to not try): %s\n",
                 steps_.size(), device_.to_string().c_str(), why.c_str());
  run_steps(ctx, workspace, scalars);  // the step itself, as plain launches
}

void Program::synchronize() const { backend_->synchronize(own_context()); }

void Program::copy_output_async(int value, void* host_dst, size_t bytes) const {
  const void* src = readable(value, bytes);
  backend_->copy_to_host_async(host_dst, src, bytes, own_context());
}

const void* Program::readable(int value, size_t bytes) const {
  if (std::find(outputs_.begin(), outputs_.end(), value) == outputs_.end())
    throw InvalidArgument("value '" + g_[value].name + "' is not an output of this program");
  const size_t have = static_cast<size_t>(g_[value].shape.numel()) * dtype_size(g_[value].dtype);
  if (bytes > have)
    throw InvalidArgument("reading " + std::to_string(bytes) + " bytes of output '" + g_[value].name + "', which has " +
                          std::to_string(have));
  return storage(value);
}

void Program::read_output(int value, void* host_dst, size_t bytes) const {
  const void* src = readable(value, bytes);
  const ExecContext ctx = own_context();
  backend_->synchronize(ctx);
  backend_->copy_to_host(host_dst, src, bytes, ctx);
}

float Program::output_scalar(int value) const {
  const Node& n = g_[value];
  if (n.shape.numel() != 1 || !is_floating(n.dtype))
    throw InvalidArgument("output '" + n.name + "' is not a floating-point scalar (shape " + n.shape.to_string() +
                          ", " + std::string(dtype_name(n.dtype)) + ")");
  alignas(4) unsigned char bytes[4] = {};
  read_output(value, bytes, dtype_size(n.dtype));
  return float_from_bytes(bytes, n.dtype);
}

Tensor Program::output(int value) const {
  const Node& n = g_[value];
  Tensor t(n.shape, n.dtype, Device::cpu(), n.name);
  read_output(value, t.raw(), t.nbytes());
  return t;
}

Program::~Program() {
  if (stream_) try {  // nothing of this program still runs when its arena goes back to the device's memory
      synchronize();
    } catch (const std::exception&) {  // the context is gone: nothing runs
    }
  if (print_profile_ && runs_ > 0) std::fputs(profile_report().c_str(), stderr);
}

std::string Program::profile_report(size_t top) const {
  std::vector<size_t> idx(steps_.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return step_seconds_[a] > step_seconds_[b]; });
  const double total = std::accumulate(step_seconds_.begin(), step_seconds_.end(), 0.0);
  char line[256];
  std::snprintf(line, sizeof line, "program profile: %lld runs, %.3f ms per run, %zu ops, arena %.2f MiB\n",
                static_cast<long long>(runs_), runs_ ? 1e3 * total / double(runs_) : 0.0, steps_.size(),
                double(plan_.arena_bytes) / (1 << 20));
  std::string out = line;
  for (size_t k = 0; k < std::min(top, idx.size()); ++k) {
    const Step& s = steps_[idx[k]];
    const Node& n = g_[s.node];
    std::snprintf(line, sizeof line, "  %6.1f%% %9.1f us  %-18s %-28s %s %s\n",
                  total > 0 ? 100 * step_seconds_[idx[k]] / total : 0.0,
                  runs_ ? 1e6 * step_seconds_[idx[k]] / double(runs_) : 0.0, std::string(op_name(n.op)).c_str(),
                  n.name.c_str(), n.shape.to_string().c_str(), std::string(dtype_name(n.dtype)).c_str());
    out += line;
  }
  return out;
}

}  // namespace tk::graph
