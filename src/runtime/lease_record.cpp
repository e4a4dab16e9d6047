// Lease records and the capacity file (runtime/lease_record.h).
#include "runtime/lease_record.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk::runtime {
namespace {

constexpr const char* kHeader = "trainkit-lease 1";
constexpr const char* kFields[] = {"device", "name", "bytes", "total", "ticket",
                                   "pid",    "uid",  "user",  "since", "command"};

[[noreturn]] void bad(const std::string& file, size_t offset, const std::string& what) {
  throw FormatError("lease ledger: " + file + ": byte " + std::to_string(offset) + ": " + what +
                    " (the ledger is corrupt: stop the job that holds this file, or remove the file if no trainkit "
                    "job is running)");
}

uint64_t number(const std::string& v, const std::string& file, size_t offset, const std::string& key) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || v[0] == '-')
    bad(file, offset, "'" + key + "' must be a non-negative integer, got '" + v + "'");
  return n;
}

}  // namespace

std::string format_lease_record(const LeaseRecord& r) {
  std::ostringstream s;
  s << kHeader << "\ndevice " << r.device << "\nname " << r.name << "\nbytes " << r.bytes << "\ntotal " << r.total
    << "\nticket " << r.ticket << "\npid " << r.pid << "\nuid " << r.uid << "\nuser " << r.user << "\nsince " << r.since
    << "\ncommand " << r.command << "\n";
  return s.str();
}

LeaseRecord parse_lease_record(const std::string& text, const std::string& file) {
  if (text.rfind(std::string(kHeader) + "\n", 0) != 0)
    bad(file, 0, text.empty() ? "the file is empty" : "it does not start with '" + std::string(kHeader) + "'");
  std::map<std::string, std::pair<std::string, size_t>> fields;
  size_t pos = std::strlen(kHeader) + 1;
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) bad(file, pos, "the last line is cut short (no newline)");
    const std::string line = text.substr(pos, eol - pos);
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0) bad(file, pos, "expected 'key value', got '" + line + "'");
    const std::string key = line.substr(0, space);
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
      bad(file, pos, "unknown field '" + key + "'");
    if (!fields.emplace(key, std::make_pair(line.substr(space + 1), pos)).second)
      bad(file, pos, "field '" + key + "' appears twice");
    pos = eol + 1;
  }
  for (const char* k : kFields)
    if (!fields.count(k)) bad(file, text.size(), std::string("field '") + k + "' is missing");
  auto num = [&](const char* k) { return number(fields[k].first, file, fields[k].second, k); };
  LeaseRecord r;
  r.device = fields["device"].first;
  r.name = fields["name"].first;
  r.bytes = num("bytes");
  r.total = num("total");
  r.ticket = num("ticket");
  r.pid = static_cast<int>(num("pid"));
  r.uid = static_cast<unsigned>(num("uid"));
  r.user = fields["user"].first;
  r.since = static_cast<int64_t>(num("since"));
  r.command = fields["command"].first;
  if (r.device.empty()) bad(file, fields["device"].second, "'device' is empty");
  return r;
}

uint64_t read_capacity_file(const std::string& path, const LeaseDevice& device) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return 0;
    throw IoError("lease ledger: cannot read " + path + ": " + std::strerror(errno) + " (make it readable, mode 0644)");
  }
  std::string line;
  size_t offset = 0;
  int number_of_line = 0;
  uint64_t found = 0;
  while (std::getline(in, line)) {
    ++number_of_line;
    const size_t here = offset;
    offset += line.size() + 1;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string name, size, extra;
    if (!(words >> name)) continue;
    if (!(words >> size) || (words >> extra))
      throw FormatError("lease ledger: " + path + ": line " + std::to_string(number_of_line) + " (byte " +
                        std::to_string(here) + "): expected '<device> <bytes>', e.g. 'cpu 64GiB' or 'cuda:0 70GiB'");
    uint64_t bytes = 0;
    try {
      bytes = config::parse_bytes(size);
    } catch (const InvalidArgument& e) {
      throw FormatError("lease ledger: " + path + ": line " + std::to_string(number_of_line) + " (byte " +
                        std::to_string(here) + "): " + e.what());
    }
    if (name == device.id || name == device.name) found = bytes;
  }
  return found;
}

}  // namespace tk::runtime
