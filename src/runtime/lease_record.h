// The lease ledger's two file formats (runtime/lease.h): a lease record, one "key value" line per field under a
// "trainkit-lease 1" header, and the admin's optional `capacity` file ("cpu 64GiB", "GPU-5a1c... 70GiB" or
// "cuda:0 70GiB" per line, '#' starts a comment).
//
//   std::string text = format_lease_record(record);
//   LeaseRecord back = parse_lease_record(text, "/run/trainkit/lease-123-0");   // FormatError names file:offset
#pragma once
#include <cstdint>
#include <string>

#include "runtime/lease.h"

namespace tk::runtime {

std::string format_lease_record(const LeaseRecord& record);
// Every field is required; FormatError("<file>: byte <offset>: ...") otherwise.
LeaseRecord parse_lease_record(const std::string& text, const std::string& file);
// The capacity the file gives `device` (by id or name); 0 when the file is absent or does not name it.
// FormatError naming the file, line and byte offset for a line that is not "<device> <bytes>".
uint64_t read_capacity_file(const std::string& path, const LeaseDevice& device);

}  // namespace tk::runtime
