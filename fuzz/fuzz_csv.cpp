// libFuzzer target for tk::data::read_csv and tk::data::open_csv (run: bash tools/run_fuzz.sh fuzz_csv).
//
// The first byte picks the options (header or not, ',' or ';', typed columns with defaults, a selection);
// the rest is the file. Both readers share one parser, so they must agree: the same values row by row, or
// the same tk::Error. A disagreement aborts (a finding), as does anything escaping other than tk::Error.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "trainkit/core/error.h"
#include "trainkit/data/csv.h"

namespace {

using tk::DType;
using tk::data::CsvOptions;

CsvOptions options(uint8_t mode) {
  CsvOptions o;
  o.header = (mode & 1) == 0;
  o.delimiter = (mode & 2) ? ';' : ',';
  if (mode & 4) {
    // With a header these must be among its names (the seeds' headers are "a,b,c,d"); without one they are
    // the file's four columns.
    o.columns = {
        {"a", DType::i32, 0.0}, {"b", DType::i64, std::nullopt}, {"c", DType::u8, 7.0}, {"d", DType::boolean, 1.0}};
    if (mode & 16) o.columns.push_back({"e", DType::f32, -1.5});
  }
  if (mode & 8) {
    if (o.header || (mode & 4))
      o.select = {"c", "a", "c"};
    else
      o.select = {"1", "0"};
  }
  return o;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_csv: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const CsvOptions o = options(data[0]);
  const std::string path = tk::fuzz::write_input(data + 1, size - 1, ".csv");

  std::vector<tk::Tensor> whole;
  std::string whole_error;
  try {
    whole = tk::data::read_csv(path, o);
  } catch (const tk::Error& e) {
    whole_error = e.what();
  }

  std::string stream_error;
  int64_t rows = 0;
  try {
    auto reader = tk::data::open_csv(path, o);
    tk::data::Element row;
    while (reader->next(row)) {
      if (whole_error.empty()) {
        if (row.size() != whole.size()) finding("open_csv and read_csv return different column counts");
        for (size_t k = 0; k < row.size(); ++k) {
          if (rows >= whole[k].numel()) finding("open_csv returns more rows than read_csv");
          size_t n = tk::dtype_size(row[k].dtype());
          if (row[k].dtype() != whole[k].dtype() || row[k].numel() != 1 ||
              std::memcmp(row[k].raw(), static_cast<const char*>(whole[k].raw()) + rows * n, n) != 0)
            finding("open_csv and read_csv disagree on a value");
        }
      }
      ++rows;
    }
    (void)reader->position();
  } catch (const tk::Error& e) {
    stream_error = e.what();
  }
  if (whole_error != stream_error) finding("open_csv and read_csv fail differently");
  if (whole_error.empty())
    for (const tk::Tensor& t : whole)
      if (t.numel() != rows) finding("open_csv returns fewer rows than read_csv");
  return 0;
}
