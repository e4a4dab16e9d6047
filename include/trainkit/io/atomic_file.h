// Files written so that a crash at any moment leaves either the old file or the new one, never a torn one.
//
//   tk::io::write_file_atomic("ckpt/weights.bin", bytes);   // whole buffer at once
//
//   tk::io::AtomicFile f("m.keras");                        // a library writes the file by name
//   write_with_libzip(f.temp_path());                        // ... into a temporary in the same folder
//   f.commit();                                              // fsync, rename over m.keras, fsync the folder
//   // destroyed without commit(): the temporary is removed and m.keras is untouched
//
// Test hook: TK_TEST_CRASH_AT=before_fsync|before_rename|after_rename makes the process SIGKILL itself at that
// point of the next commit (the kill -9 tests prove no point leaves a truncated file or a stray temporary that
// a later run would mistake for a checkpoint). Temporaries are named "<name>.tk-tmp-<pid>-<n>"; a crashed
// writer's leftovers are removed by remove_stale_temporaries(folder) (ModelCheckpoint/BackupAndRestore call it).
#pragma once
#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace tk::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path final_path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary unless commit() succeeded

  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& final_path() const { return final_; }
  // Makes the temporary's bytes durable, renames it over final_path() and makes the rename durable.
  // Throws IoError naming both paths; the final file is then untouched.
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path temp_;
  bool committed_ = false;
};

void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Removes "<name>.tk-tmp-*" files in `folder` whose writer process no longer exists. Returns how many.
int remove_stale_temporaries(const std::filesystem::path& folder);

// True for a name AtomicFile uses for its temporaries (so folder scans can skip them).
bool is_atomic_temporary(const std::filesystem::path& path);

}  // namespace tk::io
