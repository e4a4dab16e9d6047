// cache(): the first complete pass fills it (in memory, or a file written to <name>.tmp and renamed when
// the pass completes); later passes replay it. A pass that stops early leaves no cache behind, as tf.data.
//
// Cache file layout (little-endian): "TKCACHE1", then per element: uint32 component count, then per
// component: uint8 dtype, uint8 rank, int64 dims[rank], the bytes; after the last element: uint32
// 0xFFFFFFFF and uint64 element count.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

constexpr char kMagic[8] = {'T', 'K', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint32_t kEndMarker = 0xFFFFFFFFu;
constexpr int kMaxRank = 8;

struct MemoryCache {
  std::mutex mu;
  bool complete = false;
  std::shared_ptr<const std::vector<Element>> items;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

class CacheWriter {
 public:
  // A temporary name of its own (pid and a counter): passes or processes filling the same cache never
  // write into one file; each renames a complete file into place.
  explicit CacheWriter(std::string path)
      : path_(std::move(path)),
        tmp_(path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter_.fetch_add(1))) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_)
      throw IoError("cache: cannot create " + tmp_ + ": " + std::strerror(errno) +
                    " (check that the directory exists and is writable)");
    put(kMagic, sizeof kMagic);
  }
  ~CacheWriter() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());  // an incomplete pass leaves nothing behind
    }
  }
  void write(const Element& e) {
    const auto n = static_cast<uint32_t>(e.size());
    put(&n, 4);
    for (const Tensor& t : e) {
      const auto dtype = static_cast<uint8_t>(t.dtype());
      const auto rank = static_cast<uint8_t>(t.shape().rank());
      put(&dtype, 1);
      put(&rank, 1);
      put(t.shape().dims().data(), 8 * static_cast<size_t>(rank));
      put(t.raw(), t.nbytes());
    }
    ++count_;
  }
  void commit() {
    put(&kEndMarker, 4);
    put(&count_, 8);
    const bool ok = std::fflush(f_) == 0 && std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      throw IoError("cache: cannot finish " + path_ + ": " + std::strerror(errno) + " (is the disk full?)");
    }
  }

 private:
  void put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      throw IoError("cache: cannot write " + tmp_ + ": " + std::strerror(errno) + " (is the disk full?)");
  }
  static inline std::atomic<uint64_t> counter_{0};
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t count_ = 0;
};

class CacheFileReader {
 public:
  explicit CacheFileReader(std::string path) : path_(std::move(path)) {
    f_ = std::fopen(path_.c_str(), "rb");
    if (!f_) throw IoError("cache: cannot open " + path_ + ": " + std::strerror(errno));
    struct stat st {};
    ::fstat(fileno(f_), &st);
    size_ = static_cast<uint64_t>(st.st_size);
    char magic[8];
    get(magic, 8, "the header");
    if (std::memcmp(magic, kMagic, 8) != 0) corrupt(0, "it does not start with TKCACHE1");
  }
  ~CacheFileReader() { std::fclose(f_); }
  bool next(Element& out) {
    if (done_) return false;
    uint32_t n = 0;
    get(&n, 4, "a component count");
    if (n == kEndMarker) {
      uint64_t count = 0;
      get(&count, 8, "the element count");
      if (count != elements_)
        corrupt(offset_ - 8,
                "it ends after " + std::to_string(elements_) + " elements but says " + std::to_string(count));
      done_ = true;
      return false;
    }
    if (n > 1024) corrupt(offset_ - 4, "an element claims " + std::to_string(n) + " components");
    out.resize(n);
    for (uint32_t c = 0; c < n; ++c) {
      uint8_t dtype = 0, rank = 0;
      get(&dtype, 1, "a dtype");
      get(&rank, 1, "a rank");
      if (dtype >= kDTypeCount || rank > kMaxRank) corrupt(offset_ - 2, "bad dtype or rank");
      std::vector<int64_t> dims(rank);
      get(dims.data(), 8 * static_cast<size_t>(rank), "dimensions");
      uint64_t bytes = dtype_size(static_cast<DType>(dtype));
      for (int64_t d : dims) {
        if (d < 0 || (d > 0 && bytes > (size_ - offset_) / static_cast<uint64_t>(d)))
          corrupt(offset_ - 8 * rank, "a tensor's dimensions exceed the file");
        bytes *= static_cast<uint64_t>(d);
      }
      if (bytes > size_ - offset_) corrupt(offset_, "a tensor's data runs past the end of the file");
      Tensor t(Shape(dims), static_cast<DType>(dtype), Device::cpu(), "dataset/cache");
      get(t.raw(), t.nbytes(), "tensor data");
      out[c] = std::move(t);
    }
    ++elements_;
    return true;
  }

 private:
  void get(void* p, size_t n, const char* what) {
    if (n && std::fread(p, 1, n, f_) != n) corrupt(offset_, std::string("it ends inside ") + what);
    offset_ += n;
  }
  [[noreturn]] void corrupt(uint64_t at, const std::string& why) {
    throw FormatError("cache: " + path_ + " at offset " + std::to_string(at) + " is not a valid cache file: " + why +
                      " (delete it and the next pass rebuilds it)");
  }
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0, offset_ = 0, elements_ = 0;
  bool done_ = false;
};

class CacheNode final : public UnaryNode {
 public:
  CacheNode(std::shared_ptr<Node> in, std::string filename)
      : UnaryNode(std::move(in)), filename_(std::move(filename)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override { return in_card(); }
  std::string label() const override { return filename_.empty() ? "cache" : "cache(" + filename_ + ")"; }

 private:
  class It final : public IteratorImpl {
   public:
    It(const PassContext& ctx, const CacheNode& n) : IteratorImpl(ctx, "cache"), n_(n) {
      if (n.filename_.empty()) {
        std::lock_guard<std::mutex> lock(n.memory_.mu);
        if (n.memory_.complete) replay_ = n.memory_.items;
      } else if (file_exists(n.filename_)) {
        file_ = std::make_unique<CacheFileReader>(n.filename_);
      }
      if (!replay_ && !file_) {
        in_ = n.inputs[0]->make(ctx);
        if (!n.filename_.empty()) writer_ = std::make_unique<CacheWriter>(n.filename_);
      }
    }
    void cancel() override {
      if (in_) in_->cancel();
    }

   protected:
    bool do_next(Element& out) override {
      if (replay_) {
        if (pos_ >= replay_->size()) return false;
        // Copies: tensors share storage, and a map function that writes into its input must not change
        // what later passes replay.
        const Element& e = (*replay_)[pos_++];
        out.resize(e.size());
        for (size_t c = 0; c < e.size(); ++c) out[c] = e[c].clone();
        return true;
      }
      if (file_) return file_->next(out);
      if (!in_->next(out)) {
        finish();
        return false;
      }
      if (writer_) {
        writer_->write(out);
      } else {  // a copy: tensors share storage, and downstream may write into what it receives
        Element copy(out.size());
        for (size_t c = 0; c < out.size(); ++c) copy[c] = out[c].clone();
        filling_.push_back(std::move(copy));
      }
      return true;
    }

   private:
    void finish() {
      if (writer_) {
        std::unique_ptr<CacheWriter> w = std::move(writer_);  // never committed twice, even if this throws
        w->commit();
        return;
      }
      std::lock_guard<std::mutex> lock(n_.memory_.mu);
      if (!n_.memory_.complete) {
        n_.memory_.items = std::make_shared<const std::vector<Element>>(std::move(filling_));
        n_.memory_.complete = true;
      }
    }
    const CacheNode& n_;
    std::shared_ptr<const std::vector<Element>> replay_;
    size_t pos_ = 0;
    std::unique_ptr<CacheFileReader> file_;
    std::unique_ptr<IteratorImpl> in_;
    std::unique_ptr<CacheWriter> writer_;
    std::vector<Element> filling_;
  };

  std::string filename_;
  mutable MemoryCache memory_;
};

}  // namespace

std::shared_ptr<Node> make_cache_node(std::shared_ptr<Node> in, std::string filename) {
  return std::make_shared<CacheNode>(std::move(in), std::move(filename));
}

}  // namespace tk::data
