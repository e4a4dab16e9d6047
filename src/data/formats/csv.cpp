#include "trainkit/data/csv.h"

#include <locale.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>

#include "data/formats/bytes.h"

namespace tk::data {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 16;
// Bounds on what one line may make us hold, whatever the file: a binary file opened by mistake, or a line
// that never ends, fails with a message instead of exhausting memory.
constexpr uint64_t kMaxRecordBytes = uint64_t{64} << 20;
constexpr size_t kMaxColumns = size_t{1} << 20;
constexpr size_t kNone = static_cast<size_t>(-1);

// Shows a piece of the file inside a one-line message: quoted, line breaks and tabs by name, other control
// bytes escaped, UTF-8 kept (column names may be in any script), long text cut.
std::string quoted_text(std::string_view s) { return quoted(s, 40, Escape::text); }

std::string describe_char(int c) {
  char ch = static_cast<char>(c);
  return quoted_text(std::string_view(&ch, 1));
}

// One field of the current record: its (unquoted) text is Record::text[begin, end).
struct Field {
  size_t begin = 0;
  size_t end = 0;
  uint64_t offset = 0;  // byte offset of its first character (the opening quote of a quoted field)
  uint64_t line = 0;
  bool quoted = false;
};

// One logical line (a quoted field may span physical lines). `fields` is reused across records, so only the
// first `count` entries are this record's.
struct Record {
  std::string text;
  std::vector<Field> fields;
  size_t count = 0;
  uint64_t line = 0;        // 1-based line where the record starts
  uint64_t offset = 0;      // byte offset where it starts
  uint64_t end_offset = 0;  // byte offset of its line terminator (or of the end of the file)

  std::string_view field(size_t i) const {
    return std::string_view(text).substr(fields[i].begin, fields[i].end - fields[i].begin);
  }
  bool blank() const { return count == 1 && !fields[0].quoted && fields[0].begin == fields[0].end; }
  void make_blank(uint64_t at_line, uint64_t at_offset) {
    text.clear();
    if (fields.empty()) fields.emplace_back();
    fields[0] = Field{0, 0, at_offset, at_line, false};
    count = 1;
    line = at_line;
    offset = end_offset = at_offset;
  }
};

// Splits the file into records with buffered reads; knows nothing about column types.
class CsvParser {
 public:
  CsvParser(const std::string& path, char delimiter)
      : path_(path), delimiter_(delimiter), delimiter_byte_(static_cast<unsigned char>(delimiter)) {
    file_ = open_file(path, prefix());
    buffer_.resize(kBufferBytes);
    // A UTF-8 byte order mark (Excel writes one) is not part of the first column's name.
    if (fill() && len_ >= 3 && std::memcmp(buffer_.data(), "\xEF\xBB\xBF", 3) == 0) pos_ = offset_ = 3;
  }
  ~CsvParser() { std::fclose(file_); }
  CsvParser(const CsvParser&) = delete;
  CsvParser& operator=(const CsvParser&) = delete;

  std::string prefix() const { return "CSV file '" + path_ + "': "; }
  const std::string& path() const { return path_; }
  // After the header: records with more fields fail as soon as the extra one starts.
  void set_expected_fields(size_t n) { expected_ = n; }
  void set_names(const std::vector<std::string>* names) { names_ = names; }

  // "line 3, column 2 ('age'), byte offset 17"; column is 0-based, kNone for none.
  std::string at(uint64_t line, size_t column, uint64_t offset) const {
    std::string s = "line " + std::to_string(line);
    if (column != kNone) {
      s += ", column " + std::to_string(column + 1);
      if (names_ && column < names_->size()) s += " (" + quoted_text((*names_)[column]) + ")";
    }
    return s + ", byte offset " + std::to_string(offset);
  }
  [[noreturn]] void fail(const std::string& problem, const std::string& where, const std::string& detail,
                         const std::string& todo) const {
    throw FormatError(prefix() + problem + " at " + where + ": " + detail + " (" + todo + ")");
  }

  // Reads the next record; false at the end of the file.
  bool next(Record& r) {
    if (peek() == EOF) return false;
    r.text.clear();
    r.count = 0;
    r.line = line_;
    r.offset = offset_;
    for (;;) {
      if (r.count == r.fields.size()) r.fields.emplace_back();
      Field& f = r.fields[r.count++];
      f = Field{r.text.size(), r.text.size(), offset_, line_, false};
      check_field_count(r, f);
      int c = peek();
      if (c == '"') {
        f.quoted = true;
        advance();
        for (;;) {
          c = peek();
          if (c == EOF)
            fail("unterminated quoted field", at(f.line, r.count - 1, f.offset), "the file ends inside its quotes",
                 "close the quote; a quote inside a quoted field is written twice: \"\"");
          advance();
          if (c == '"') {
            if (peek() != '"') break;
            advance();
          } else if (c == '\n' || (c == '\r' && peek() != '\n')) {
            ++line_;  // a line break inside the quotes is part of the field
          }
          append(r, static_cast<char>(c));
        }
        f.end = r.text.size();
        c = peek();
        if (c != delimiter_byte_ && c != '\n' && c != '\r' && c != EOF)
          fail(
              "unexpected character after a closing quote", at(line_, r.count - 1, offset_),
              "found " + describe_char(c) + " where " + describe_char(delimiter_) + " or the end of the line should be",
              "a quote inside a quoted field is written twice: \"\"");
      } else {
        c = scan_unquoted(r);
        f.end = r.text.size();
      }
      if (c != delimiter_byte_) break;
      advance();
    }
    r.end_offset = offset_;
    int c = peek();
    if (c == '\r') {
      advance();
      if (peek() == '\n') advance();
      ++line_;
    } else if (c == '\n') {
      advance();
      ++line_;
    }
    return true;
  }

 private:
  int peek() {
    if (pos_ == len_ && !fill()) return EOF;
    return static_cast<unsigned char>(buffer_[pos_]);
  }
  void advance() { ++pos_, ++offset_; }
  bool fill() {
    if (eof_) return false;
    errno = 0;
    size_t n = std::fread(buffer_.data(), 1, buffer_.size(), file_);
    if (n == 0) {
      if (std::ferror(file_))
        throw IoError(prefix() + "read failed at byte offset " + std::to_string(offset_) + ": " +
                      (errno ? std::strerror(errno) : "unknown error") + " (check the file and the disk)");
      eof_ = true;
      return false;
    }
    pos_ = 0;
    len_ = n;
    return true;
  }
  void check_record_size(const Record& r) const {
    if (offset_ - r.offset > kMaxRecordBytes)
      fail("line too long", at(r.line, kNone, r.offset),
           "the line (with any quoted line breaks) is longer than " + std::to_string(kMaxRecordBytes >> 20) + " MiB",
           "is this a CSV file? an unbalanced quote also makes the rest of the file one field");
  }
  void append(Record& r, char c) {
    if ((r.text.size() & 0xFFFF) == 0) check_record_size(r);
    r.text += c;
  }
  void check_field_count(const Record& r, const Field& f) const {
    if (expected_ && r.count > expected_)
      fail("wrong number of fields", at(f.line, r.count - 1, f.offset),
           "expected " + std::to_string(expected_) + " fields but the line has more",
           "check the delimiter, and quote fields that contain it");
    if (r.count > kMaxColumns)
      fail("too many columns", at(f.line, r.count - 1, f.offset),
           "more than " + std::to_string(kMaxColumns) + " fields on one line", "is this a CSV file?");
    if ((r.count & 0xFFFF) == 0) check_record_size(r);
  }
  // Copies an unquoted field's bytes in runs; returns the character that ended it (not consumed).
  int scan_unquoted(Record& r) {
    for (;;) {
      int c = peek();
      if (c == EOF) return c;
      const char* begin = buffer_.data() + pos_;
      const char* end = buffer_.data() + len_;
      const char* p = begin;
      while (p != end && *p != delimiter_ && *p != '\n' && *p != '\r') ++p;
      auto n = static_cast<size_t>(p - begin);
      r.text.append(begin, n);
      pos_ += n;
      offset_ += n;
      check_record_size(r);
      if (p != end) return static_cast<unsigned char>(*p);
    }
  }

  std::string path_;
  char delimiter_;
  int delimiter_byte_;  // as peek() returns it, also for a delimiter above 0x7F
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;  // (kBufferBytes,) the bytes [pos_, len_) are not yet consumed
  size_t pos_ = 0;
  size_t len_ = 0;
  bool eof_ = false;
  uint64_t offset_ = 0;  // of buffer_[pos_] in the file
  uint64_t line_ = 1;
  size_t expected_ = 0;
  const std::vector<std::string>* names_ = nullptr;
};

// ---- values ----

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// from_chars takes no leading '+'; a number may have one (but not "+-1").
bool strip_plus(std::string_view& s) {
  if (s.empty() || s[0] != '+') return true;
  s.remove_prefix(1);
  return !s.empty() && s[0] != '-' && s[0] != '+';
}

struct IntRange {
  int64_t lo, hi;
};
IntRange int_range(DType t) {
  switch (t) {
    case DType::i32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::u8:
      return {0, 255};
    case DType::boolean:
      return {0, 1};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

void store_int(int64_t v, DType t, void* dst) {
  if (t == DType::i64) {
    std::memcpy(dst, &v, 8);
  } else if (t == DType::i32) {
    auto x = static_cast<int32_t>(v);
    std::memcpy(dst, &x, 4);
  } else {
    *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(v);
  }
}

// Parses trimmed, non-empty text into *dst (dtype_size(t) bytes). Returns "" or what is wrong with it.
std::string parse_value(std::string_view s, DType t, void* dst) {
  if (t == DType::f32) {
    if (!strip_plus(s)) return "is not a number";
    float v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (end != s.data() + s.size()) return "is not a number";
    if (ec == std::errc::result_out_of_range) {
      // from_chars reports underflow and overflow alike; strtod tells them apart (tiny values become 0). In
      // the C locale, so that a process locale with a decimal comma cannot change the result.
      static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", locale_t{});
      double d = strtod_l(std::string(s).c_str(), nullptr, c_locale);
      if (!(std::fabs(d) <= std::numeric_limits<float>::max())) return "is out of float32 range";
      v = static_cast<float>(d);
    } else if (ec != std::errc()) {
      return "is not a number";
    }
    std::memcpy(dst, &v, 4);
    return "";
  }
  if (t == DType::boolean) {
    static constexpr std::string_view kTrue[] = {"1", "true", "True", "TRUE"};
    static constexpr std::string_view kFalse[] = {"0", "false", "False", "FALSE"};
    auto* out = static_cast<uint8_t*>(dst);
    if (std::find(std::begin(kTrue), std::end(kTrue), s) != std::end(kTrue)) {
      *out = 1;
    } else if (std::find(std::begin(kFalse), std::end(kFalse), s) != std::end(kFalse)) {
      *out = 0;
    } else {
      return "is not a bool (expected 0, 1, true or false)";
    }
    return "";
  }
  IntRange range = int_range(t);
  if (!strip_plus(s)) return "is not an integer";
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (end != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return "is not an integer";
  if (ec == std::errc::result_out_of_range || v < range.lo || v > range.hi)
    return "is out of range for " + std::string(dtype_name(t)) + " (" + std::to_string(range.lo) + " to " +
           std::to_string(range.hi) + ")";
  store_int(v, t, dst);
  return "";
}

// ---- columns ----

struct ColumnSpec {
  DType dtype = DType::f32;
  bool has_default = false;
  uint8_t default_bytes[8] = {};
};

std::string list_names(const std::vector<std::string>& names) {
  std::string s;
  size_t shown = std::min<size_t>(names.size(), 50);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + quoted_text(names[i]);
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s.empty() ? "none" : s;
}

void validate_column(const CsvColumn& c, const std::string& prefix, ColumnSpec& spec) {
  DType t = c.dtype;
  if (t != DType::f32 && t != DType::i32 && t != DType::i64 && t != DType::u8 && t != DType::boolean)
    throw InvalidArgument(prefix + "column " + quoted_text(c.name) + " is declared " + std::string(dtype_name(t)) +
                          ", but CSV columns can be float32, int32, int64, uint8 or bool (read it as float32 and "
                          "convert)");
  spec.dtype = t;
  if (!c.default_value) return;
  double d = *c.default_value;
  spec.has_default = true;
  if (t == DType::f32) {
    if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
      throw InvalidArgument(prefix + "the default_value " + std::to_string(d) + " of column " + quoted_text(c.name) +
                            " is out of float32 range (use a smaller value)");
    auto f = static_cast<float>(d);
    std::memcpy(spec.default_bytes, &f, 4);
    return;
  }
  IntRange range = int_range(t);
  // The bounds as doubles: int64's are not exact, so its check is `< 2^63` rather than `<= hi`.
  if (!(d == std::trunc(d) && d >= static_cast<double>(range.lo) &&
        (t == DType::i64 ? d < 9223372036854775808.0 : d <= static_cast<double>(range.hi))))
    throw InvalidArgument(prefix + "the default_value " + std::to_string(d) + " of " + std::string(dtype_name(t)) +
                          " column " + quoted_text(c.name) + " is not an integer from " + std::to_string(range.lo) +
                          " to " + std::to_string(range.hi) + " (use one that is)");
  store_int(static_cast<int64_t>(d), t, spec.default_bytes);
}

// Everything both readers share: the parser, the header, the resolved columns and the blank-line rule.
class CsvTable {
 public:
  CsvTable(const std::string& path, const CsvOptions& options) : parser_(path, options.delimiter) {
    std::string opt = parser_.prefix() + "CsvOptions: ";
    char d = options.delimiter;
    if (d == '"' || d == '\n' || d == '\r')
      throw InvalidArgument(opt + "delimiter " + describe_char(d) + " cannot separate fields (use ',', ';' or '\\t')");
    for (size_t i = 0; i < options.columns.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (options.columns[i].name == options.columns[j].name)
          throw InvalidArgument(opt + "column " + quoted_text(options.columns[i].name) +
                                " is declared twice in CsvOptions::columns (declare it once)");

    Record& first = first_;
    if (options.header) {
      if (!parser_.next(first))
        parser_.fail("missing header", parser_.at(1, kNone, 0), "the file is empty",
                     "set CsvOptions::header = false for a file without a header line, or check the path");
      if (first.blank())
        parser_.fail("blank header", parser_.at(first.line, kNone, first.offset),
                     "the first line, which should name the columns, is empty",
                     "remove the blank line or set CsvOptions::header = false");
      for (size_t i = 0; i < first.count; ++i) names_.emplace_back(first.field(i));
      specs_.resize(names_.size());
      for (const CsvColumn& c : options.columns) {
        size_t i = find(c.name, "CsvOptions::columns");
        validate_column(c, opt, specs_[i]);
      }
    } else if (!options.columns.empty()) {
      specs_.resize(options.columns.size());
      for (size_t i = 0; i < options.columns.size(); ++i) {
        names_.push_back(options.columns[i].name);
        validate_column(options.columns[i], opt, specs_[i]);
      }
    } else {
      if (!fetch(first))
        parser_.fail("no columns", parser_.at(1, kNone, 0), "the file is empty, so the number of columns is unknown",
                     "declare CsvOptions::columns to read an empty file as zero rows");
      for (size_t i = 0; i < first.count; ++i) names_.push_back(std::to_string(i));
      specs_.resize(names_.size());
      have_first_ = true;
    }
    parser_.set_expected_fields(names_.size());
    parser_.set_names(&names_);

    if (options.select.empty()) {
      for (size_t i = 0; i < names_.size(); ++i) selected_.push_back(i);
    } else {
      for (const std::string& name : options.select) selected_.push_back(find(name, "CsvOptions::select"));
    }
  }

  const std::string& path() const { return parser_.path(); }
  size_t num_selected() const { return selected_.size(); }
  DType dtype(size_t k) const { return specs_[selected_[k]].dtype; }

  // The next data record, with its field count checked; false at the end of the file.
  bool next(Record& r) {
    if (!fetch(r)) return false;
    if (r.count > names_.size()) {  // only a record read before the count was known gets here
      const Field& extra = r.fields[names_.size()];
      parser_.fail("wrong number of fields", parser_.at(extra.line, names_.size(), extra.offset),
                   "expected " + std::to_string(names_.size()) + " fields but the line has " + std::to_string(r.count),
                   "check the delimiter, and quote fields that contain it");
    }
    if (r.count < names_.size()) {
      if (r.blank())
        parser_.fail("blank line", parser_.at(r.line, kNone, r.offset),
                     "expected " + std::to_string(names_.size()) + " fields",
                     "remove the blank line; blank lines are allowed only at the end of the file");
      parser_.fail(
          "wrong number of fields", parser_.at(r.line, r.count, r.end_offset),
          "expected " + std::to_string(names_.size()) + " fields but the line ends after " + std::to_string(r.count),
          "check the delimiter, and quote fields that contain it");
    }
    return true;
  }

  // Parses the k-th selected column of r into dst (dtype_size(dtype(k)) bytes).
  void parse(const Record& r, size_t k, void* dst) const {
    size_t col = selected_[k];
    const ColumnSpec& spec = specs_[col];
    const Field& f = r.fields[col];
    std::string_view text = trim(r.field(col));
    if (text.empty()) {
      if (!spec.has_default)
        parser_.fail("missing value", parser_.at(f.line, col, f.offset),
                     "the field is empty and the column has no default_value",
                     "fill in the value, or declare the column in CsvOptions::columns with a default_value");
      std::memcpy(dst, spec.default_bytes, dtype_size(spec.dtype));
      return;
    }
    std::string problem = parse_value(text, spec.dtype, dst);
    if (!problem.empty())
      parser_.fail("bad " + std::string(dtype_name(spec.dtype)) + " value", parser_.at(f.line, col, f.offset),
                   quoted_text(text) + " " + problem,
                   spec.dtype == DType::f32 ? "fix the value" : "fix the value, or declare the column float32");
  }

 private:
  // The next record with the blank-line rule applied: blank lines at the end of the file are dropped, blank
  // lines before more data are returned (a one-column file reads them as missing values).
  bool fetch(Record& r) {
    if (have_first_) {
      std::swap(r, first_);
      have_first_ = false;
      return true;
    }
    if (blanks_pending_) {
      r.make_blank(blank_line_++, blank_offset_);
      --blanks_pending_;
      return true;
    }
    if (have_ahead_) {
      std::swap(r, ahead_);
      have_ahead_ = false;
      return true;
    }
    if (!parser_.next(r)) return false;
    if (!r.blank()) return true;
    // Only blank lines can be consumed here, so counting them is enough to replay them; a later blank line
    // never gets to an error message (it passes wherever the first one did), so its offset is the first one's.
    uint64_t blanks = 0;
    while (parser_.next(ahead_)) {
      if (!ahead_.blank()) {
        have_ahead_ = true;
        break;
      }
      ++blanks;
    }
    if (!have_ahead_) return false;
    blanks_pending_ = blanks;
    blank_line_ = r.line + 1;
    blank_offset_ = r.offset;
    return true;
  }

  size_t find(const std::string& name, const char* option) const {
    size_t found = kNone;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] != name) continue;
      if (found != kNone)
        throw InvalidArgument(parser_.prefix() + option + " names column " + quoted_text(name) +
                              ", but the header has it twice (columns " + std::to_string(found + 1) + " and " +
                              std::to_string(i + 1) + "; rename one in the file)");
      found = i;
    }
    if (found == kNone)
      throw InvalidArgument(parser_.prefix() + option + " names column " + quoted_text(name) +
                            ", which the file does not have; its columns are " + list_names(names_) +
                            " (use one of these names)");
    return found;
  }

  CsvParser parser_;
  std::vector<std::string> names_;  // (columns,)
  std::vector<ColumnSpec> specs_;   // (columns,)
  std::vector<size_t> selected_;    // (outputs,) indices into names_
  Record first_;                    // the first data record, read to count the columns of a file without header
  bool have_first_ = false;
  Record ahead_;
  bool have_ahead_ = false;
  uint64_t blanks_pending_ = 0;
  uint64_t blank_line_ = 0;
  uint64_t blank_offset_ = 0;
};

class CsvReader final : public ElementReader {
 public:
  CsvReader(const std::string& path, const CsvOptions& options) : table_(path, options) {}

  bool next(Element& out) override {
    if (!table_.next(record_)) {
      done_ = true;
      return false;
    }
    line_ = record_.line;
    out.resize(table_.num_selected());
    for (size_t k = 0; k < out.size(); ++k) {
      // A fresh tensor per row: the caller may still hold the previous row's.
      out[k] = Tensor(Shape{}, table_.dtype(k), Device::cpu(), table_.path());
      table_.parse(record_, k, out[k].raw());
    }
    return true;
  }

  std::string position() const override {
    std::string where = "CSV file '" + table_.path() + "' ";
    if (done_) return where + "at the end";
    if (line_ == 0) return where + "before the first row";
    return where + "line " + std::to_string(line_);
  }

 private:
  CsvTable table_;
  Record record_;
  uint64_t line_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<ElementReader> open_csv(const std::string& path, const CsvOptions& options) {
  return std::make_unique<CsvReader>(path, options);
}

std::vector<Tensor> read_csv(const std::string& path, const CsvOptions& options) {
  CsvTable table(path, options);
  size_t n = table.num_selected();
  std::vector<std::vector<uint8_t>> columns(n);  // (outputs,) each (rows * dtype size,) bytes
  Record record;
  int64_t rows = 0;
  while (table.next(record)) {
    for (size_t k = 0; k < n; ++k) {
      std::vector<uint8_t>& c = columns[k];
      size_t size = dtype_size(table.dtype(k));
      c.resize(c.size() + size);
      table.parse(record, k, c.data() + c.size() - size);
    }
    ++rows;
  }
  std::vector<Tensor> out;
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    Tensor t(Shape{rows}, table.dtype(k), Device::cpu(), path);
    if (!columns[k].empty()) std::memcpy(t.raw(), columns[k].data(), columns[k].size());
    std::vector<uint8_t>().swap(columns[k]);  // release as we go: peak memory stays near one copy
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace tk::data
