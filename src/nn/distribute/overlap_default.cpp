// choose_overlap (overlap_default.h): plain C++, in every build.
#include "nn/distribute/overlap_default.h"

#include "trainkit/core/error.h"

namespace tk::nn::distribute {

OverlapChoice choose_overlap(std::optional<bool> option, const char* env, OverlapGroup group) {
  std::optional<bool> asked = option;
  if (!asked && env && *env) {
    const std::string v = env;
    if (v == "1" || v == "true" || v == "on")
      asked = true;
    else if (v == "0" || v == "false" || v == "off")
      asked = false;
    else
      throw InvalidArgument("TK_ALLREDUCE_OVERLAP='" + v + "': expected 1 or 0");
  }
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
