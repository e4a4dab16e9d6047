#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "temp_files.h"
#include "trainkit/data/csv.h"
namespace tk::data {
namespace {

using test::temp_dir;
using test::temp_path;

std::string write_csv(const std::string& name, const std::string& text) {
  std::string path = temp_path(name + ".csv");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!text.empty()) {
    EXPECT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  }
  std::fclose(f);
  return path;
}

std::vector<float> floats(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::f32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}
template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Reads the file both ways (whole and streamed) expecting exception E from each, with every fragment and the
// path in its one-line message; returns read_csv's message.
template <typename E>
std::string expect_error(const std::string& path, const CsvOptions& options,
                         const std::vector<std::string>& fragments) {
  std::string first;
  for (bool streamed : {false, true}) {
    SCOPED_TRACE(streamed ? "open_csv" : "read_csv");
    try {
      if (streamed) {
        auto reader = open_csv(path, options);
        Element row;
        while (reader->next(row)) {
        }
      } else {
        read_csv(path, options);
      }
      ADD_FAILURE() << "no exception for '" << path << "'";
    } catch (const E& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << "path missing from: " << msg;
      for (const std::string& f : fragments)
        EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' missing from: " << msg;
      if (!streamed) first = msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }
  return first;
}

std::string offset(size_t n) { return "byte offset " + std::to_string(n); }
// The message fragment for where `piece` first occurs in the file (plus `skip` bytes).
std::string offset_of(const std::string& text, const std::string& piece, size_t skip = 0) {
  size_t at = text.find(piece);
  EXPECT_NE(at, std::string::npos) << piece;
  return offset(at + skip);
}

// ---- reading ----

TEST(CsvRead, AllColumnsAsFloat32WithNamesFromTheHeader) {
  std::string path = write_csv("basic", "a,b,c\n1,2.5,-3\n4,5e2,  6 \n");
  std::vector<Tensor> cols = read_csv(path, {});
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[0].shape(), (Shape{2}));
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{1, 4}));
  EXPECT_EQ(floats(cols[1]), (std::vector<float>{2.5f, 500}));
  EXPECT_EQ(floats(cols[2]), (std::vector<float>{-3, 6}));  // spaces around a number are ignored
}

TEST(CsvRead, TypedColumnsSelectedInOutputOrder) {
  std::string path = write_csv("typed",
                               "id,flag,x,label,pixel\n"
                               "9000000000,true,0.25,-7,255\n"
                               "-9000000000,0,+1.5,+3,0\n");
  CsvOptions o;
  o.columns = {{"label", DType::i32}, {"id", DType::i64}, {"flag", DType::boolean}, {"pixel", DType::u8}};
  o.select = {"pixel", "label", "x", "id", "flag", "label"};
  std::vector<Tensor> cols = read_csv(path, o);
  ASSERT_EQ(cols.size(), 6u);
  EXPECT_EQ(values<uint8_t>(cols[0]), (std::vector<uint8_t>{255, 0}));
  EXPECT_EQ(values<int32_t>(cols[1]), (std::vector<int32_t>{-7, 3}));
  EXPECT_EQ(floats(cols[2]), (std::vector<float>{0.25f, 1.5f}));  // not declared: float32
  EXPECT_EQ(values<int64_t>(cols[3]), (std::vector<int64_t>{9000000000, -9000000000}));
  EXPECT_EQ(cols[4].dtype(), DType::boolean);
  EXPECT_EQ(cols[4].data<bool>()[0], true);
  EXPECT_EQ(cols[4].data<bool>()[1], false);
  EXPECT_EQ(values<int32_t>(cols[5]), (std::vector<int32_t>{-7, 3}));  // a name may repeat
}

TEST(CsvRead, IntegerLimits) {
  std::string path = write_csv("limits",
                               "i32,i64\n"
                               "2147483647,9223372036854775807\n"
                               "-2147483648,-9223372036854775808\n");
  CsvOptions o;
  o.columns = {{"i32", DType::i32}, {"i64", DType::i64}};
  std::vector<Tensor> cols = read_csv(path, o);
  EXPECT_EQ(values<int32_t>(cols[0]), (std::vector<int32_t>{INT32_MAX, INT32_MIN}));
  EXPECT_EQ(values<int64_t>(cols[1]), (std::vector<int64_t>{INT64_MAX, INT64_MIN}));
}

TEST(CsvRead, QuotedFieldsPerRfc4180) {
  // A quoted header name with the delimiter, doubled quotes and a line break in it; quoted numbers.
  std::string text =
      "id,\"x,y\",\"say \"\"hi\"\"\",\"two\nlines\"\n"
      "1,\"2.5\",3,\"4\"\n"
      "\"5\",6,\" 7 \",8\n";
  std::string path = write_csv("quoted", text);
  CsvOptions o;
  o.select = {"say \"hi\"", "x,y", "two\nlines"};
  std::vector<Tensor> cols = read_csv(path, o);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{3, 7}));
  EXPECT_EQ(floats(cols[1]), (std::vector<float>{2.5f, 6}));
  EXPECT_EQ(floats(cols[2]), (std::vector<float>{4, 8}));
  // The header spans lines 1-2, so the data are on lines 3 and 4: an error names the physical line.
  std::string bad = text + "9,x,9,9\n";
  expect_error<FormatError>(write_csv("quoted_bad", bad), {},
                            {"bad float32 value at line 5, column 2 ('x,y'), " + offset_of(bad, "x,9,9"), "'x'"});
}

TEST(CsvRead, CrlfLineEndsAndUtf8ByteOrderMark) {
  std::string path = write_csv("crlf",
                               "\xEF\xBB\xBF"
                               "a,b\r\n1,2\r\n3,4\r\n");
  std::vector<Tensor> cols = read_csv(path, {});
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{1, 3}));
  EXPECT_EQ(floats(cols[1]), (std::vector<float>{2, 4}));
  CsvOptions o;
  o.select = {"a"};  // the BOM is not part of the first name
  EXPECT_EQ(read_csv(path, o).size(), 1u);
  std::string bad = "a,b\r\n1,2\r\n3,?\r\n";
  expect_error<FormatError>(write_csv("crlf_bad", bad), {}, {"at line 3, column 2 ('b'), " + offset_of(bad, "?")});
}

TEST(CsvRead, TrailingBlankLinesAndMissingFinalNewline) {
  for (const char* text : {"a,b\n1,2\n3,4", "a,b\n1,2\n3,4\n", "a,b\n1,2\n3,4\n\n", "a,b\r\n1,2\r\n3,4\r\n\r\n\r\n"}) {
    SCOPED_TRACE(text);
    std::vector<Tensor> cols = read_csv(write_csv("trailing", text), {});
    EXPECT_EQ(floats(cols[0]), (std::vector<float>{1, 3}));
    EXPECT_EQ(floats(cols[1]), (std::vector<float>{2, 4}));
  }
}

TEST(CsvRead, BlankLineBeforeMoreData) {
  std::string text = "a,b\n1,2\n\n3,4\n";
  expect_error<FormatError>(write_csv("blank_mid", text), {},
                            {"blank line at line 3, " + offset_of(text, "\n\n", 1), "expected 2 fields"});
  // In a one-column file a blank line is an empty field: a missing value, or the default.
  std::string one = "a\n1\n\n\n3\n\n";
  expect_error<FormatError>(write_csv("blank_one", one), {}, {"missing value at line 3, column 1 ('a')"});
  CsvOptions o;
  o.columns = {{"a", DType::i32, -1.0}};
  EXPECT_EQ(values<int32_t>(read_csv(write_csv("blank_one", one), o)[0]), (std::vector<int32_t>{1, -1, -1, 3}));
}

TEST(CsvRead, HeaderOnlyAndEmptyFiles) {
  std::vector<Tensor> cols = read_csv(write_csv("header_only", "a,b\n"), {});
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].shape(), (Shape{0}));
  CsvOptions o;
  o.header = false;
  o.columns = {{"x"}, {"y", DType::i64}};
  cols = read_csv(write_csv("empty", ""), o);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[1].shape(), (Shape{0}));
  EXPECT_EQ(cols[1].dtype(), DType::i64);
  expect_error<FormatError>(write_csv("empty", ""), {}, {"missing header at line 1, byte offset 0", "empty"});
  CsvOptions no_header;
  no_header.header = false;
  expect_error<FormatError>(write_csv("empty", ""), no_header, {"no columns", "declare CsvOptions::columns"});
}

TEST(CsvRead, WithoutHeader) {
  std::string path = write_csv("no_header", "1,2,3\n4,5,6\n");
  CsvOptions o;
  o.header = false;
  o.select = {"2", "0"};  // columns are named by index
  std::vector<Tensor> cols = read_csv(path, o);
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{3, 6}));
  EXPECT_EQ(floats(cols[1]), (std::vector<float>{1, 4}));
  o.columns = {{"x"}, {"y", DType::i32}, {"label", DType::u8}};
  o.select = {"label", "y"};
  cols = read_csv(path, o);
  EXPECT_EQ(values<uint8_t>(cols[0]), (std::vector<uint8_t>{3, 6}));
  EXPECT_EQ(values<int32_t>(cols[1]), (std::vector<int32_t>{2, 5}));
  // The first line sets the field count.
  std::string text = "1,2\n3,4,5\n";
  o = {};
  o.header = false;
  expect_error<FormatError>(write_csv("no_header_bad", text), o,
                            {"wrong number of fields at line 2, column 3, " + offset_of(text, "5")});
}

TEST(CsvRead, OtherDelimiters) {
  CsvOptions o;
  o.delimiter = ';';
  o.select = {"b"};
  std::vector<Tensor> cols = read_csv(write_csv("semicolon", "a;b\n1,5;2\n"), o);  // ',' is an ordinary byte here
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{2}));
  o.select = {};
  o.delimiter = '\t';
  cols = read_csv(write_csv("tab", "a\tb\n1\t2\n"), o);
  EXPECT_EQ(floats(cols[1]), (std::vector<float>{2}));
  expect_error<FormatError>(write_csv("semicolon", "a;b\n1,5;2\n"), {},
                            {"wrong number of fields at line 2, column 2, byte offset 6"});
}

TEST(CsvRead, FloatEdgeCases) {
  std::string path = write_csv("floats", "x\n1e-50\n-0\ninf\n-inf\n3.4028234e38\n");
  std::vector<float> v = floats(read_csv(path, {})[0]);
  EXPECT_EQ(v[0], 0.0f);  // below float's range: rounds to zero, as in NumPy
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_TRUE(std::isinf(v[2]) && v[2] > 0);
  EXPECT_TRUE(std::isinf(v[3]) && v[3] < 0);
  EXPECT_EQ(v[4], 3.4028234e38f);
  expect_error<FormatError>(write_csv("float_big", "x\n1\n1e40\n"), {},
                            {"bad float32 value at line 3, column 1 ('x'), byte offset 4", "out of float32 range"});
}

// ---- streaming ----

TEST(CsvStream, ScalarsPerRowAndPosition) {
  std::string path = write_csv("stream", "a,b,c\n1,2,3\n4,5,6\n");
  CsvOptions o;
  o.columns = {{"b", DType::i64}};
  o.select = {"c", "b"};
  auto reader = open_csv(path, o);
  EXPECT_NE(reader->position().find("before the first row"), std::string::npos) << reader->position();
  Element row;
  ASSERT_TRUE(reader->next(row));
  ASSERT_EQ(row.size(), 2u);
  EXPECT_EQ(row[0].shape(), Shape{});
  EXPECT_EQ(row[0].data<float>()[0], 3.0f);
  EXPECT_EQ(row[1].dtype(), DType::i64);
  EXPECT_EQ(row[1].data<int64_t>()[0], 2);
  EXPECT_EQ(reader->position(), "CSV file '" + path + "' line 2");
  Tensor kept = row[0];  // the next row must not overwrite a tensor the caller kept
  ASSERT_TRUE(reader->next(row));
  EXPECT_EQ(row[0].data<float>()[0], 6.0f);
  EXPECT_EQ(kept.data<float>()[0], 3.0f);
  EXPECT_EQ(reader->position(), "CSV file '" + path + "' line 3");
  EXPECT_FALSE(reader->next(row));
  EXPECT_FALSE(reader->next(row));
}

TEST(CsvStream, ErrorsArriveAtTheirRow) {
  // The file is streamed: rows before the bad one are delivered, the error comes with the bad row.
  std::string text = "a\n1\n2\nx\n4\n";
  auto reader = open_csv(write_csv("late_error", text), {});
  Element row;
  ASSERT_TRUE(reader->next(row));
  ASSERT_TRUE(reader->next(row));
  EXPECT_THROW(reader->next(row), FormatError);
}

TEST(CsvStream, LargeFileMatchesReadCsv) {
  // Several times the reader's 64 KiB buffer, with quoted fields (and quotes) falling across its refills.
  std::string text = "id,\"name\",value\n";
  for (int i = 0; i < 20000; ++i)
    text += std::to_string(i) + ",\"row \"\"" + std::to_string(i) + "\"\", a,b\"," + std::to_string(i * 0.5) + "\r\n";
  std::string path = write_csv("large", text);
  CsvOptions o;
  o.columns = {{"id", DType::i32}};
  o.select = {"value", "id"};
  std::vector<Tensor> cols = read_csv(path, o);
  ASSERT_EQ(cols[0].shape(), (Shape{20000}));
  auto reader = open_csv(path, o);
  Element row;
  int64_t n = 0;
  while (reader->next(row)) {
    ASSERT_EQ(row[0].data<float>()[0], cols[0].data<float>()[n]);
    ASSERT_EQ(row[1].data<int32_t>()[0], n);
    ASSERT_EQ(cols[1].data<int32_t>()[n], n);
    ++n;
  }
  EXPECT_EQ(n, 20000);
  EXPECT_EQ(cols[0].data<float>()[19999], 9999.5f);
  std::string bad = text + "20000,x,oops\r\n";
  expect_error<FormatError>(write_csv("large_bad", bad), o,
                            {"at line 20002, column 3 ('value'), " + offset_of(bad, "oops")});
}

TEST(CsvStream, EveryTokenAcrossTheBufferBoundary) {
  // The reader refills a 64 KiB buffer; shifting one row byte by byte puts each of its tokens (opening quote,
  // doubled quote, closing quote, delimiter, CR, LF) on the refill boundary in turn.
  const std::string head = "name,v\r\n";
  for (size_t shift = 0; shift < 16; ++shift) {
    SCOPED_TRACE(shift);
    std::string row = "\"" + std::string(65536 - head.size() - 8 + shift, 'x') + "\"\"y\",1\r\n";
    std::string text = head + row + "\"z\",2\r\n" + "w,oops\r\n";
    CsvOptions o;
    o.columns = {{"v", DType::i32}};
    o.select = {"v"};
    auto reader = open_csv(write_csv("boundary", text), o);
    Element e;
    ASSERT_TRUE(reader->next(e));
    EXPECT_EQ(e[0].data<int32_t>()[0], 1);
    ASSERT_TRUE(reader->next(e));
    EXPECT_EQ(e[0].data<int32_t>()[0], 2);
    try {
      reader->next(e);
      ADD_FAILURE() << "no exception";
    } catch (const FormatError& err) {
      EXPECT_NE(std::string(err.what()).find("at line 4, column 2 ('v'), " + offset_of(text, "oops")),
                std::string::npos)
          << err.what();
    }
    o.select = {"name"};
    o.columns = {};
    expect_error<FormatError>(write_csv("boundary", text), o, {"'xxxxxxxx", "is not a number"});
  }
}

// ---- missing values ----

TEST(CsvMissing, EmptyFieldWithoutDefaultIsAnError) {
  std::string text = "a,b,c\n1,2,3\n4,,6\n";
  std::string msg = expect_error<FormatError>(
      write_csv("missing", text), {}, {"missing value at line 3, column 2 ('b'), byte offset 14", "default_value"});
  EXPECT_EQ(text.substr(14, 1), ",");  // the empty field starts right after "4,"
  // A quoted empty field and one of spaces are missing too.
  expect_error<FormatError>(write_csv("missing_quoted", "a,b\n1,\"\"\n"), {}, {"missing value at line 2, column 2"});
  expect_error<FormatError>(write_csv("missing_spaces", "a,b\n1,  \n"), {}, {"missing value at line 2, column 2"});
}

TEST(CsvMissing, DefaultValueFillsEmptyFields) {
  std::string path = write_csv("defaults", "a,b,c,d\n1,,,\n,2,3,1\n");
  CsvOptions o;
  o.columns = {{"a", DType::f32, -0.5}, {"b", DType::i32, -1.0}, {"c", DType::i64, 1e15}, {"d", DType::boolean, 0.0}};
  std::vector<Tensor> cols = read_csv(path, o);
  EXPECT_EQ(floats(cols[0]), (std::vector<float>{1, -0.5f}));
  EXPECT_EQ(values<int32_t>(cols[1]), (std::vector<int32_t>{-1, 2}));
  EXPECT_EQ(values<int64_t>(cols[2]), (std::vector<int64_t>{1000000000000000, 3}));
  EXPECT_EQ(cols[3].data<bool>()[0], false);
  EXPECT_EQ(cols[3].data<bool>()[1], true);
  // Only declared columns have defaults; an unselected column is not parsed at all.
  CsvOptions partial;
  partial.columns = {{"b", DType::i32, 0.0}};
  expect_error<FormatError>(write_csv("defaults", "a,b,c,d\n1,,,\n"), partial,
                            {"missing value at line 2, column 3 ('c')"});
  partial.select = {"a", "b"};
  EXPECT_EQ(values<int32_t>(read_csv(write_csv("defaults", "a,b,c,d\n1,,,\n"), partial)[1]), (std::vector<int32_t>{0}));
}

TEST(CsvMissing, DefaultsMustFitTheColumn) {
  std::string path = write_csv("bad_default", "a\n1\n");
  for (auto [dtype, value] : {std::pair{DType::i32, 1.5},
                              {DType::u8, 256.0},
                              {DType::u8, -1.0},
                              {DType::i64, 1e19},
                              {DType::boolean, 2.0},
                              {DType::f32, 1e39}}) {
    CsvOptions o;
    o.columns = {{"a", dtype, value}};
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(value));
    expect_error<InvalidArgument>(path, o, {"default_value", "'a'"});
  }
}

// ---- errors ----

TEST(CsvErrors, BadNumbers) {
  struct Case {
    DType dtype;
    std::string value;
    std::string problem;
  };
  for (const Case& c : std::vector<Case>{{DType::f32, "abc", "is not a number"},
                                         {DType::f32, "1.5.2", "is not a number"},
                                         {DType::f32, "+-1", "is not a number"},
                                         {DType::f32, "0x10", "is not a number"},
                                         {DType::i32, "1.5", "is not an integer"},
                                         {DType::i32, "3000000000", "out of range for int32"},
                                         {DType::i64, "9223372036854775808", "out of range for int64"},
                                         {DType::u8, "256", "out of range for uint8 (0 to 255)"},
                                         {DType::u8, "-1", "out of range for uint8"},
                                         {DType::boolean, "yes", "is not a bool"}}) {
    SCOPED_TRACE(c.value);
    std::string text = "id,v\n1,0\n2," + c.value + "\n";
    CsvOptions o;
    o.columns = {{"v", c.dtype}};
    expect_error<FormatError>(write_csv("bad_number", text), o,
                              {"bad " + std::string(dtype_name(c.dtype)) + " value at line 3, column 2 ('v'), " +
                                   offset_of(text, "2," + c.value, 2),
                               c.problem});
  }
}

TEST(CsvErrors, WrongFieldCount) {
  std::string more = "a,b\n1,2\n3,4,5\n";
  expect_error<FormatError>(write_csv("more_fields", more), {},
                            {"wrong number of fields at line 3, column 3, " + offset_of(more, "5"), "expected 2"});
  std::string fewer = "a,b,c\n1,2,3\n4,5\n";
  expect_error<FormatError>(write_csv("fewer_fields", fewer), {},
                            {"wrong number of fields at line 3, column 3 ('c'), " + offset(15), "ends after 2"});
}

TEST(CsvErrors, UnterminatedQuote) {
  std::string text = "a,b\n1,2\n3,\"4\n5,6\n";
  expect_error<FormatError>(write_csv("unterminated", text), {},
                            {"unterminated quoted field at line 3, column 2 ('b'), " + offset_of(text, "\"4"),
                             "the file ends inside its quotes"});
}

TEST(CsvErrors, TextAfterClosingQuote) {
  std::string text = "a,b\n1,\"2\"x\n";
  expect_error<FormatError>(
      write_csv("after_quote", text), {},
      {"unexpected character after a closing quote at line 2, column 2 ('b'), " + offset_of(text, "x"), "found 'x'"});
}

TEST(CsvErrors, NonexistentFileAndDirectory) {
  expect_error<IoError>(temp_path("no_such.csv"), {}, {"cannot open", "No such file or directory"});
  std::string dir = temp_path("a_dir");
  std::filesystem::create_directories(dir);
  expect_error<IoError>(dir, {}, {"read failed at byte offset 0", "Is a directory"});
}

TEST(CsvErrors, UnknownColumnNamesListTheHeader) {
  std::string path = write_csv("names", "alpha,beta,gamma\n1,2,3\n");
  CsvOptions o;
  o.select = {"beta", "delta"};
  expect_error<InvalidArgument>(path, o, {"CsvOptions::select names column 'delta'", "'alpha', 'beta', 'gamma'"});
  o = {};
  o.columns = {{"Alpha", DType::i32}};
  expect_error<InvalidArgument>(path, o, {"CsvOptions::columns names column 'Alpha'", "'alpha', 'beta', 'gamma'"});
  o = {};
  o.select = {"x"};
  expect_error<InvalidArgument>(write_csv("dup", "x,y,x\n1,2,3\n"), o, {"twice (columns 1 and 3"});
}

TEST(CsvErrors, InvalidOptions) {
  std::string path = write_csv("opts", "a,b\n1,2\n");
  CsvOptions o;
  o.columns = {{"a", DType::f16}};
  expect_error<InvalidArgument>(path, o, {"float16", "float32, int32, int64, uint8 or bool"});
  o = {};
  o.columns = {{"a"}, {"a", DType::i32}};
  expect_error<InvalidArgument>(path, o, {"declared twice"});
  o = {};
  o.delimiter = '"';
  expect_error<InvalidArgument>(path, o, {"delimiter"});
}

TEST(CsvErrors, BinaryGarbageFailsCleanly) {
  std::string text = "a,b\n";
  for (int i = 0; i < 3000; ++i) text += static_cast<char>((i * 7919) % 256);
  try {
    read_csv(write_csv("garbage", text), {});
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("byte offset"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk::data
