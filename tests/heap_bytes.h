// Bytes the C++ heap holds (operator new, replaced in tests/test_alloc.cpp for the whole trainkit_tests binary):
// what a Tensor's allocator does not see (config::get_memory_info counts tensors), e.g. a std::vector copy of a
// weight. Sizes as malloc_usable_size reports them.
//
//   tk::testing::reset_heap_peak();  run();  EXPECT_LE(tk::testing::heap_peak() - before, kSmall);
#pragma once
#include <cstdint>

namespace tk::testing {

int64_t heap_bytes();    // held now
int64_t heap_peak();     // the most held since the last reset_heap_peak()
void reset_heap_peak();  // the peak becomes what is held now

}  // namespace tk::testing
