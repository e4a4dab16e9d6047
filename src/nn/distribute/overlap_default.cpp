// choose_overlap (overlap_default.h): plain C++, in every build.
#include "nn/distribute/overlap_default.h"

#include "runtime/settings.h"

namespace tk::nn::distribute {

OverlapChoice choose_overlap(std::optional<bool> option, const char* env, OverlapGroup group) {
  std::optional<bool> asked = option;
  if (!asked && env) asked = runtime::parse_setting_bool(runtime::Setting::allreduce_overlap, env);
  switch (group) {
    case OverlapGroup::nccl:
      return {asked.value_or(true), {}};
    case OverlapGroup::mpi:
      return {asked.value_or(false), {}};
    case OverlapGroup::in_process_cpu:
      return {false, asked.value_or(false) ? "overlap asked for but not built for cpu replicas in one process (ignored)"
                                           : std::string()};
  }
  return {};
}

}  // namespace tk::nn::distribute
