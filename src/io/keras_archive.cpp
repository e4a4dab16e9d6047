// The .keras zip through libzip: read from a file or from memory, written in memory (then atomically).
#include <zip.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "io/keras_internal.h"
#include "trainkit/core/error.h"

namespace tk::io::keras {

namespace {

constexpr zip_uint64_t kMaxMemberBytes = zip_uint64_t{1} << 31;
constexpr zip_uint64_t kPieceBytes = zip_uint64_t{1} << 16;

// The error's text, e finished.
std::string zip_message(zip_error_t& e) {
  std::string msg = zip_error_strerror(&e);
  zip_error_fini(&e);
  return msg;
}

std::string zip_message(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  return zip_message(e);
}

// Calls `piece(bytes, n)` over a member's bytes in order, at most 64 KiB at a time; false when the member is absent
// and not required. Checks its size, its end and its CRC.
template <typename Piece>
bool read_member_pieces(zip_t* za, const char* name, const std::string& label, bool required, Piece&& piece) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(za, name, 0, &st) != 0) {
    if (!required) return false;
    throw FormatError(label + ": the archive has no member '" + name +
                      "' (a .keras file holds metadata.json, config.json and model.weights.h5)");
  }
  if (!(st.valid & ZIP_STAT_SIZE) || st.size > kMaxMemberBytes)
    throw FormatError(label + ": member '" + name + "' is larger than 2 GiB or has no size (damaged?)");
  zip_file_t* f = zip_fopen(za, name, 0);
  if (!f)
    throw FormatError(label + ": cannot open member '" + name + "': " + zip_error_strerror(zip_get_error(za)) +
                      " (the file is damaged; save it again)");
  std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> guard(f, zip_fclose);
  std::vector<char> buf(static_cast<size_t>(std::min<zip_uint64_t>(st.size, kPieceBytes)) + 1);
  zip_uint64_t total = 0;
  while (total < st.size) {
    const zip_int64_t got = zip_fread(f, buf.data(), std::min<zip_uint64_t>(st.size - total, buf.size() - 1));
    if (got < 0)
      throw FormatError(label + ": cannot read member '" + name + "' at byte " + std::to_string(total) + ": " +
                        zip_error_strerror(zip_file_get_error(f)) +
                        " (the file is damaged or truncated; save it again)");
    if (got == 0) break;
    piece(buf.data(), static_cast<size_t>(got));
    total += static_cast<zip_uint64_t>(got);
  }
  if (total != st.size)
    throw FormatError(label + ": member '" + name + "' ends after " + std::to_string(total) + " of " +
                      std::to_string(st.size) + " bytes (truncated; save it again)");
  char extra = 0;  // libzip checks the CRC when a read reaches the end of the member
  if (zip_fread(f, &extra, 1) != 0)
    throw FormatError(label + ": cannot read member '" + name + "' to its end: " +
                      zip_error_strerror(zip_file_get_error(f)) + " (the file is damaged; save it again)");
  return true;
}

std::string read_member(zip_t* za, const char* name, const std::string& label, bool required) {
  std::string out;
  read_member_pieces(za, name, label, required, [&](const char* p, size_t n) { out.append(p, n); });
  return out;
}

Archive read_open(zip_t* za, const std::string& label, bool with_weights = true) {
  std::unique_ptr<zip_t, void (*)(zip_t*)> guard(za, zip_discard);
  Archive a;
  a.metadata = read_member(za, "metadata.json", label, false);
  a.config = read_member(za, "config.json", label, true);
  if (with_weights) a.weights = read_member(za, "model.weights.h5", label, true);
  return a;
}

[[noreturn]] void not_zip(const std::string& label, const std::string& why) {
  throw FormatError(label + ": not a readable .keras archive (zip): " + why +
                    " (the file is truncated, damaged or not a .keras file; save it again)");
}

zip_t* open_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(path + ": cannot open: " + std::strerror(errno) + " (check the path)");
  std::fclose(f);
  int code = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!za) not_zip(path, zip_message(code));
  return za;
}

// Adds source s (null: false) as the member `name`, stored uncompressed; false on failure, zip_get_error(za) says why.
bool add_stored(zip_t* za, const char* name, zip_source_t* s) {
  if (!s) return false;
  const zip_int64_t idx = zip_file_add(za, name, s, ZIP_FL_ENC_UTF_8);
  if (idx < 0) {
    zip_source_free(s);
    return false;
  }
  return zip_set_file_compression(za, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0) == 0;
}

}  // namespace

Archive read_archive(const std::string& path, bool with_weights) {
  return read_open(open_file(path), path, with_weights);
}

void extract_weights_member(const std::string& path, TempFile& out) {
  std::unique_ptr<zip_t, void (*)(zip_t*)> za(open_file(path), zip_discard);
  read_member_pieces(za.get(), "model.weights.h5", path, true, [&](const char* p, size_t n) { out.write_all(p, n); });
}

Archive read_archive_bytes(const std::string& label, const void* data, size_t size) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(data, size, 0, &err);
  if (!src) throw Error(label + ": libzip: " + zip_message(err));
  zip_t* za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!za) {
    zip_source_free(src);
    not_zip(label, zip_message(err));
  }
  zip_error_fini(&err);
  return read_open(za, label);
}

json parse_json(const std::string& text, const std::string& label) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw FormatError(label + ": not valid JSON at byte " + std::to_string(e.byte) + ": " + e.what() +
                      " (the file is damaged; save it again)");
  }
}

void check_metadata(const std::string& metadata, const std::string& label) {
  if (metadata.empty()) return;  // optional in Keras' own reader
  const json m = parse_json(metadata, label + ": metadata.json");
  if (!m.is_object() || !m.contains("keras_version") || !m["keras_version"].is_string())
    throw FormatError(label + ": metadata.json has no keras_version string");
  const std::string v = m["keras_version"].get<std::string>();
  if (v.rfind("3.", 0) != 0)
    throw Unsupported(label + ": written by Keras " + v +
                      ", a version trainkit does not read as .keras (it reads Keras 3.x .keras files; for Keras 2 "
                      "save as .h5, which trainkit loads)");
}

std::string write_archive(const Archive& a) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(nullptr, 0, 0, &err);
  if (!src) throw Error(std::string("libzip: ") + zip_error_strerror(&err));
  zip_t* za = zip_open_from_source(src, ZIP_TRUNCATE, &err);
  if (!za) {
    zip_source_free(src);
    throw Error(std::string("libzip: ") + zip_error_strerror(&err));
  }
  zip_source_keep(src);
  auto fail = [&](const char* what) {
    std::string m = std::string("writing the .keras archive: ") + what + ": " + zip_error_strerror(zip_get_error(za));
    zip_discard(za);
    zip_source_free(src);
    throw Error(m);
  };
  for (const auto& [name, bytes] : {std::pair<const char*, const std::string*>{"metadata.json", &a.metadata},
                                    {"config.json", &a.config},
                                    {"model.weights.h5", &a.weights}})
    if (!add_stored(za, name, zip_source_buffer(za, bytes->data(), bytes->size(), 0))) fail(name);
  if (zip_close(za) != 0) fail("close");
  std::string out;
  if (zip_source_open(src) != 0 || zip_source_seek(src, 0, SEEK_END) != 0) {
    zip_source_free(src);
    throw Error("writing the .keras archive: cannot read back the archive built in memory");
  }
  const zip_int64_t size = zip_source_tell(src);
  zip_source_seek(src, 0, SEEK_SET);
  out.resize(static_cast<size_t>(size < 0 ? 0 : size));
  const zip_int64_t got = zip_source_read(src, out.data(), out.size());
  zip_source_close(src);
  zip_source_free(src);
  if (got != size) throw Error("writing the .keras archive: short read of the archive built in memory");
  return out;
}

void write_archive_file(const std::string& metadata, const std::string& config, const std::string& weights_file,
                        const std::string& out, const std::string& label) {
  int code = 0;
  zip_t* za = zip_open(out.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (!za) throw IoError(label + ": cannot create " + out + ": " + zip_message(code));
  auto fail = [&](const char* what) {
    const std::string m = label + ": writing the .keras archive: " + what + ": " +
                          zip_error_strerror(zip_get_error(za)) + " (is the disk full?)";
    zip_discard(za);
    throw IoError(m);
  };
  auto add = [&](const char* name, zip_source_t* s) {
    if (!add_stored(za, name, s)) fail(name);
  };
  add("metadata.json", zip_source_buffer(za, metadata.data(), metadata.size(), 0));
  add("config.json", zip_source_buffer(za, config.data(), config.size(), 0));
  // Copied from the file by libzip in small pieces when the archive is closed: no copy of the weights in memory.
  add("model.weights.h5", zip_source_file(za, weights_file.c_str(), 0, -1));
  if (zip_close(za) != 0) fail("close");
}

}  // namespace tk::io::keras
