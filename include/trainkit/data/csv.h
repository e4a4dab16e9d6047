// CSV files (RFC 4180: quoted fields, doubled quotes, CRLF or LF line ends), read as typed numeric columns.
//
//   // Header "pixel0,pixel1,label": every column float32, names from the header.
//   std::vector<tk::Tensor> cols = tk::data::read_csv("train.csv", {});        // 3 tensors, each (rows,)
//
//   tk::data::CsvOptions o;
//   o.columns = {{"label", tk::DType::i32}, {"pixel1", tk::DType::f32, 0.0}};   // pixel1 may be empty: 0
//   o.select = {"pixel1", "label"};                                             // output order
//   auto r = tk::data::open_csv("train.csv", o);                                // streams the file
//   tk::data::Element row;
//   while (r->next(row)) { /* row[0]: float32 scalar (pixel1), row[1]: int32 scalar (label) */ }
//
// Errors: tk::IoError (cannot open or read), tk::FormatError (bad contents: the message names the file, the
// line, the column and the byte offset), tk::InvalidArgument (options that contradict each other or the
// header, e.g. an unknown column name: the message lists the names the file has).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/data/reader.h"

namespace tk::data {

// How one column is parsed. Supported dtypes: float32, int32, int64, uint8 and bool (0/1, true/false).
struct CsvColumn {
  std::string name;
  DType dtype = DType::f32;
  // Used for an empty field; without it an empty field is a FormatError. Integer columns need an integral
  // value within the dtype's range.
  std::optional<double> default_value;
};

struct CsvOptions {
  // Empty: every column is float32 without a default.
  // With a header: entries are matched to the header's names (any order, any subset; unlisted columns are
  // float32 without a default). Without a header: entries describe all of the file's columns, in file order.
  std::vector<CsvColumn> columns;
  // The first line holds column names. Without a header, columns are named by `columns` or, when that is
  // empty, by their 0-based index ("0", "1", ...), and the field count comes from the first line.
  bool header = true;
  char delimiter = ',';
  // Columns to return, by name, in output order (a name may repeat); empty: all columns in file order.
  // Columns that are not selected are counted but not parsed.
  std::vector<std::string> select;
};

// Streams the file with buffered reads; each element holds one scalar tensor (shape ()) per selected column.
// The header (and with it every option) is checked here, before the first element.
std::unique_ptr<ElementReader> open_csv(const std::string& path, const CsvOptions& options = {});

// Reads the whole file: one 1-D tensor (rows,) per selected column, in `select` order.
std::vector<Tensor> read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace tk::data
