// Callbacks that write files: BackupAndRestore (the training state, atomically) and CSVLogger.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "trainkit/core/error.h"
#include "trainkit/io/atomic_file.h"
#include "trainkit/io/training_state_file.h"
#include "trainkit/nn/keras_callbacks.h"
#include "trainkit/nn/model.h"

namespace tk::callbacks {
namespace fs = std::filesystem;

// ---------------------------------------------------------------- BackupAndRestore
BackupAndRestore::BackupAndRestore(std::string backup_dir, BackupAndRestoreOptions options)
    : dir_(std::move(backup_dir)), o_(options) {
  if (dir_.empty()) throw InvalidArgument("BackupAndRestore: backup_dir is empty (give a folder for the backup)");
  if (o_.save_freq < 0)
    throw InvalidArgument("BackupAndRestore: save_freq must be 0 (every epoch) or a number of steps > 0, got " +
                          std::to_string(o_.save_freq));
}

BackupAndRestore::~BackupAndRestore() { unlock_folder(); }

void BackupAndRestore::lock_folder() {
  if (lock_fd_ >= 0) return;  // this callback already holds it (a fit that threw, then another)
  const std::string path = (fs::path(dir_) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("BackupAndRestore: cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {0};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    throw IoError("BackupAndRestore: backup folder " + dir_ + " is in use by another training (pid " +
                  (n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown")) +
                  "): give each run its own --backup-dir, or wait for that one to finish");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid only makes the message above more helpful; the lock itself holds.
  }
  lock_fd_ = fd;
}

void BackupAndRestore::unlock_folder() {
  if (lock_fd_ < 0) return;
  ::close(lock_fd_);  // releases the flock
  lock_fd_ = -1;
}

std::string BackupAndRestore::backup_path() const { return (fs::path(dir_) / "latest.tkstate").string(); }

void BackupAndRestore::on_train_begin(const Logs&) {
  restored_.reset();
  // Under MPI the chief alone owns the folder (locks it, writes the backup); every rank restores from it, so the
  // folder must be one that every rank sees (one machine, or a shared filesystem, as Keras requires). A rank that
  // cannot see it starts at another step than the chief: the check before the first step names the ranks.
  if (is_chief()) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) throw IoError("BackupAndRestore: cannot create backup folder " + dir_ + ": " + ec.message());
    lock_folder();
    io::remove_stale_temporaries(dir_);  // what a writer killed mid-save left behind
  }
  if (!fs::exists(backup_path())) return;
  const TrainingState state = io::load_training_state(backup_path());
  model->restore_training_state(state);
  restored_ = state.position;
  if (params.verbose > 0)
    std::printf("BackupAndRestore: resuming from %s at epoch %d, batch %lld (step %lld)\n", backup_path().c_str(),
                state.position.epoch + 1, static_cast<long long>(state.position.batch),
                static_cast<long long>(state.iterations));
}

void BackupAndRestore::save() {
  if (is_chief()) io::save_training_state(backup_path(), model->training_state_view());  // streamed, no copies
}

void BackupAndRestore::on_train_batch_end(int64_t, const Logs&) {
  // Counted in optimizer steps, so a resumed run saves at the same steps as an uninterrupted one.
  if (o_.save_freq > 0 && model->optimizer()->iterations() % o_.save_freq == 0) save();
}

void BackupAndRestore::on_epoch_end(int, const Logs&) {
  if (o_.save_freq == 0) save();
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (!o_.delete_checkpoint) {  // kept: it holds the finished run, so a later fit with more epochs continues
    save();
  } else if (is_chief()) {
    std::error_code ec;
    fs::remove(backup_path(), ec);
  }
  unlock_folder();
}

// ---------------------------------------------------------------- CSVLogger
namespace {

// Python's repr of a float: the shortest text that reads back to the same double.
std::string repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // 1 -> "1.0" as Python prints it
  return s;
}

}  // namespace

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), sep_(separator), append_(append) {
  if (filename_.empty()) throw InvalidArgument("CSVLogger: filename is empty");
}

void CSVLogger::on_train_begin(const Logs&) {
  text_.clear();
  keys_.clear();
  if (append_ && fs::exists(filename_)) {
    std::ifstream in(filename_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text_ = ss.str();
    if (!text_.empty() && text_.back() != '\n') text_ += '\n';
    // Keep the existing header's columns: the rows that follow must line up with it.
    std::istringstream header(text_.substr(0, text_.find('\n')));
    std::string field;
    std::getline(header, field, sep_);  // "epoch"
    while (std::getline(header, field, sep_)) keys_.push_back(field);
  }
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (keys_.empty()) {
    for (const auto& [k, v] : logs.items()) keys_.push_back(k);
    std::sort(keys_.begin(), keys_.end());
    text_ += "epoch";
    for (const std::string& k : keys_) text_ += sep_ + k;
    text_ += '\n';
  }
  text_ += std::to_string(epoch);
  for (const std::string& k : keys_) {
    text_ += sep_;
    if (logs.contains(k)) text_ += repr(logs.get(k));  // a key missing this epoch: an empty cell ('NA' in Keras 2)
  }
  text_ += '\n';
  if (is_chief()) io::write_file_atomic(filename_, text_);  // under MPI: rank 0 alone
}

// ---------------------------------------------------------------- ModelCheckpoint
namespace {

// One Python format field: value with spec ("02d", ".2f", ".4e", "" ...), as str.format prints it.
std::string format_field(double value, const std::string& spec, const std::string& field) {
  if (spec.empty()) return repr(value);
  // [0][width][.precision][type]
  size_t i = 0;
  std::string flags;
  if (i < spec.size() && spec[i] == '0') flags = "0", ++i;
  std::string width, precision;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width += spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) precision += spec[i++];
  }
  const char type = i < spec.size() ? spec[i++] : 'g';
  if (i != spec.size() || std::string("dfeEgG").find(type) == std::string::npos || width.size() > 3 ||
      precision.size() > 2)
    throw InvalidArgument("ModelCheckpoint: unsupported format spec '" + spec + "' for {" + field +
                          "} (use forms like {epoch:02d}, {val_loss:.2f}, {loss:.4e})");
  char buf[128];
  if (type == 'd') {
    const std::string fmt = "%" + flags + width + "lld";
    std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<long long>(value));
  } else {
    const std::string fmt = "%" + flags + width + (precision.empty() ? "" : "." + precision) + type;
    std::snprintf(buf, sizeof buf, fmt.c_str(), value);
  }
  return buf;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(std::string filepath, ModelCheckpointOptions options)
    : filepath_(std::move(filepath)), o_(std::move(options)) {
  if (o_.save_weights_only && !filepath_.ends_with(".weights.h5"))
    throw InvalidArgument("ModelCheckpoint: with save_weights_only the filepath must end in .weights.h5, got " +
                          filepath_);
  if (!o_.save_weights_only && !filepath_.ends_with(".keras"))
    throw InvalidArgument(
        "ModelCheckpoint: the filepath must end in .keras (or .weights.h5 with "
        "save_weights_only), got " +
        filepath_);
  if (o_.save_freq < 0)
    throw InvalidArgument("ModelCheckpoint: save_freq must be 0 (every epoch) or a number of batches > 0");
  // Keras: "auto" maximizes accuracy-like monitors ("acc", "fmeasure"), minimizes the rest.
  maximize_ = o_.mode == Mode::max || (o_.mode == Mode::automatic && (o_.monitor.find("acc") != std::string::npos ||
                                                                      o_.monitor.rfind("fmeasure", 0) == 0));
  format_path(0, Logs{});  // a malformed pattern fails here, not after the first epoch
}

std::string ModelCheckpoint::format_path(int epoch, const Logs& logs) const {
  std::string out;
  for (size_t i = 0; i < filepath_.size(); ++i) {
    const char c = filepath_[i];
    if ((c == '{' || c == '}') && i + 1 < filepath_.size() && filepath_[i + 1] == c) {  // {{ and }}
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = filepath_.find('}', i);
    if (close == std::string::npos)
      throw InvalidArgument("ModelCheckpoint: unclosed '{' at " + std::to_string(i) + " in filepath " + filepath_);
    const std::string field = filepath_.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    if (name == "epoch") {
      out += format_field(epoch + 1, spec.empty() ? "d" : spec, name);
    } else if (logs.contains(name)) {
      out += format_field(logs.get(name), spec, name);
    } else if (logs.items().empty()) {  // checking the pattern before training: any log name may follow
      format_field(0.0, spec, name);
    } else {
      std::string known;
      for (const auto& [k, v] : logs.items()) known += ", " + k;
      throw InvalidArgument("ModelCheckpoint: filepath " + filepath_ + " names {" + name +
                            "}, which is not a log (available: epoch" + known + ")");
    }
    i = close;
  }
  return out;
}

void ModelCheckpoint::on_train_begin(const Logs&) {
  best_ = o_.initial_value_threshold
              ? *o_.initial_value_threshold
              : (maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
  batches_since_save_ = 0;
}

void ModelCheckpoint::on_epoch_begin(int epoch, const Logs&) { current_epoch_ = epoch; }

void ModelCheckpoint::on_train_batch_end(int64_t, const Logs& logs) {
  if (o_.save_freq > 0 && ++batches_since_save_ >= o_.save_freq) {
    batches_since_save_ = 0;
    save(current_epoch_, logs);
  }
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  if (o_.save_freq == 0) save(epoch, logs);
}

void ModelCheckpoint::save(int epoch, const Logs& logs) {
  if (!is_chief()) return;  // under MPI: rank 0 alone saves (and prints); the logs are the global batch's everywhere
  const std::string path = format_path(epoch, logs);
  if (o_.save_best_only) {
    if (!logs.contains(o_.monitor)) {
      if (!warned_)
        std::fprintf(stderr, "WARNING: Can save best model only with %s available, skipping.\n", o_.monitor.c_str());
      warned_ = true;
      return;
    }
    const double current = logs.get(o_.monitor);
    if (!(maximize_ ? current > best_ : current < best_)) {
      if (o_.verbose > 0)
        std::printf("\nEpoch %05d: %s did not improve from %0.5f\n", epoch + 1, o_.monitor.c_str(), best_);
      return;
    }
    if (o_.verbose > 0)
      std::printf("\nEpoch %05d: %s improved from %0.5f to %0.5f, saving model to %s\n", epoch + 1, o_.monitor.c_str(),
                  best_, current, path.c_str());
    best_ = current;
  } else if (o_.verbose > 0) {
    std::printf("\nEpoch %05d: saving model to %s\n", epoch + 1, path.c_str());
  }
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty()) {
    std::error_code ec;
    fs::create_directories(folder, ec);
    io::remove_stale_temporaries(folder);
  }
  if (o_.save_weights_only)
    model->save_weights(path);
  else
    model->save(path);
}

}  // namespace tk::callbacks
