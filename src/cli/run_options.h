// The options every command that builds a model shares: where it runs, in which dtype policy, under which
// memory budget — the same words the library uses (Model::set_device, Model::set_dtype_policy, TK_MEMORY_LIMIT).
//
//   trainkit fit --device cpu --dtype-policy float32 --memory-limit 1.5GiB
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "cli/lease_options.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

struct RunOptions {
  std::string device = "cpu";            // cpu, cpu:N, cuda, cuda:N (gpu is an alias of cuda)
  std::string dtype_policy = "float32";  // Keras' policy names
  std::string memory_limit;              // e.g. 1.5GiB; the same as TK_MEMORY_LIMIT, which it overrides
  LeaseOptions lease;                    // --no-wait, --wait-timeout (cli/lease_options.h)
  bool dtype_policy_given = false;       // --dtype-policy on the command line (else a model file keeps its own)
};

void add_run_options(CLI::App* command, RunOptions& options);
// Checks every option before any data is loaded and sets the budget (it must precede the first allocation);
// returns the device. InvalidArgument / Unsupported name the option and what to do.
Device apply_run_options(const RunOptions& options);
// "cpu", "cpu:N", "cuda", "cuda:N" ("gpu" as "cuda"), case-insensitive; InvalidArgument naming the flag otherwise. The
// device need not exist here.
Device parse_device(const std::string& text);
// --memory-limit's bytes ("24GiB", "1.5GB", "512MiB"); InvalidArgument naming the flag otherwise.
size_t parse_memory_limit(const std::string& text);
// Puts the model on the device; in --dtype-policy's policy when it is given (a model made from a layer spec already
// has the global policy apply_run_options set; a model file keeps its own).
void configure_model(Model& model, const RunOptions& options, Device device);
// --replicas N (fit, plan): the cpu split into N logical devices with equal shares of its budget, and a
// MirroredStrategy over them (what a program that calls set_logical_device_configuration and MirroredStrategy runs);
// on cuda:i, a MirroredStrategy over cuda:i .. cuda:i+N-1 (NCCL), each GPU under `memory_limit` when one was given.
// `command` names the command in errors ("trainkit fit").
distribute::MirroredStrategy replicas_over(Device device, int replicas, const std::string& command,
                                           const std::string& memory_limit = {});

}  // namespace tk::cli
