// Saving and loading inside the plan (issue 36): saves, checkpoints and backups write each tensor from its own
// memory (no copy of all weights or optimizer state), so a fit that trains under a budget also saves under it;
// planning a model file reads no weights; file memory is named and gets file advice.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "heap_bytes.h"
#include "io/file_staging.h"
#include "io/hdf5_tree.h"
#include "io/onnx_file.h"
#include "trainkit/io/training_state_file.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

using namespace tk;
using namespace tk_cli_test;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Model> small_mlp() {
  return std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({64}), layers::Dense(256, "relu"),
                                                            layers::Dense(128, "relu"), layers::Dense(10)});
}
std::unique_ptr<Model> small_cnn() {
  using namespace layers;
  return std::make_unique<Sequential>(std::vector<LayerPtr>{
      layers::Input({12, 12, 3}), Conv2D(8, 3, "relu"), BatchNormalization(), MaxPooling2D(2), Flatten(), Dense(10)});
}

std::pair<Tensor, Tensor> batch_for(const Model& m, int64_t rows) {
  std::vector<int64_t> xs{rows};
  const Shape sample = m.inputs().at(0).shape().sample_shape();
  xs.insert(xs.end(), sample.dims().begin(), sample.dims().end());
  Tensor x = Tensor::full(Shape(xs), 0.25f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919) % 101) / 101.0f;
  Tensor y(Shape{rows}, DType::i32);
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  return {x, y};
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("tk_save_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

// Every save writes from the tensors' own memory: after training, .keras, .weights.h5 and a training-state backup
// raise the measured peak by exactly 0 bytes (the plan's file-staging line on the cpu), and the files load back to
// the same weights and optimizer state.
TEST(SaveMemory, SavesAllocateNothingBeyondThePlan) {
  const fs::path dir = temp_dir("saves");
  for (auto make : {small_mlp, small_cnn}) {
    std::unique_ptr<Model> m = make();
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    auto [x, y] = batch_for(*m, 32);
    m->train_on_batch({x}, {y});
    const MemoryPlan plan = m->memory_plan(32);
    EXPECT_EQ(plan.file_staging, 0u) << "the cpu writes each tensor from its own memory";
    EXPECT_NE(plan.to_string().find("file staging"), std::string::npos) << plan.to_string();
    const size_t before = config::get_memory_info().current;
    config::reset_peak_memory();
    m->save((dir / "m.keras").string());
    m->save_weights((dir / "m.weights.h5").string());
    io::save_training_state(dir / "latest.tkstate", m->training_state_view());
    EXPECT_EQ(config::get_memory_info().peak, before) << "a save allocated memory the plan does not show";
    EXPECT_EQ(config::get_memory_info().current, before);

    // The same bytes come back: weights and optimizer slots, from each file.
    const std::vector<Tensor> w = m->get_weights();
    const std::vector<std::vector<Tensor>> slots = m->get_optimizer_slots();
    std::unique_ptr<Model> back = models::load_model((dir / "m.keras").string());
    const std::vector<Tensor> w2 = back->get_weights();
    const std::vector<std::vector<Tensor>> slots2 = back->get_optimizer_slots();
    ASSERT_EQ(w.size(), w2.size());
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_EQ(std::memcmp(w[i].raw(), w2[i].raw(), w[i].nbytes()), 0) << "weight " << i;
    ASSERT_EQ(slots.size(), slots2.size());
    for (size_t i = 0; i < slots.size(); ++i)
      for (size_t k = 0; k < slots[i].size(); ++k)
        EXPECT_EQ(std::memcmp(slots[i][k].raw(), slots2[i][k].raw(), slots[i][k].nbytes()), 0) << i << "/" << k;
    const TrainingState s = io::load_training_state(dir / "latest.tkstate");
    EXPECT_EQ(io::encode_training_state(s), io::encode_training_state(m->training_state()));
  }
}

// A model saved before its first step has no optimizer slots yet: they are written as HDF5 fill values (nothing of
// their size is allocated), and read back as the optimizer's initial values.
TEST(SaveMemory, SlotsThatDoNotExistYetAreWrittenWithoutAllocatingThem) {
  const fs::path dir = temp_dir("unborn");
  std::unique_ptr<Model> m = small_mlp();
  m->compile(optimizers::Adagrad(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const size_t before = config::get_memory_info().current;
  config::reset_peak_memory();
  m->save((dir / "fresh.keras").string());
  EXPECT_EQ(config::get_memory_info().peak, before);
  std::unique_ptr<Model> back = models::load_model((dir / "fresh.keras").string());
  const std::vector<std::vector<Tensor>> slots = back->get_optimizer_slots();
  ASSERT_FALSE(slots.empty());
  EXPECT_FLOAT_EQ(slots[0][0].data<float>()[0], 0.1f) << "Adagrad's initial_accumulator_value";
}

// Owner tags: memory a file operation holds names the file and the tensor; a GPU's tensor streams in pieces of the
// staging buffer's size (here a host tensor stands in: one piece from its own memory).
TEST(SaveMemory, FileMemoryIsNamedAndStreamsInPieces) {
  Tensor t = Tensor::full(Shape{1000}, 1.5f);
  EXPECT_EQ(io::file_staging_bytes(t), 0u);
  size_t pieces = 0, bytes = 0;
  io::for_each_piece(t, "m.keras", "dense/kernel", [&](const void* p, size_t n) {
    ++pieces, bytes += n;
    EXPECT_EQ(p, t.raw()) << "a host tensor is written from its own memory";
  });
  EXPECT_EQ(pieces, 1u);
  EXPECT_EQ(bytes, t.nbytes());
  EXPECT_EQ(io::file_owner("m.keras", "staging for", "dense/kernel"), "m.keras: staging for dense/kernel");
}

// The pieces a GPU's tensor is written in (rows of its trailing dimensions, or parts of its last one), exercised on a
// host tensor: every piece size gives back the same dataset.
TEST(SaveMemory, TensorsWrittenInPiecesReadBackTheSame) {
  const fs::path dir = temp_dir("pieces");
  Tensor t(Shape{3, 5, 7}, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  io::H5Tree tree;
  tree.groups.insert("");
  tree.datasets["x"] = t;
  for (size_t piece : {size_t{4}, size_t{24}, size_t{28}, size_t{100}, size_t{140}, size_t{300}, size_t{0}}) {
    const std::string file = (dir / ("p" + std::to_string(piece) + ".h5")).string();
    io::write_h5_tree_file(tree, file, file, piece);
    const io::H5Tree back = io::read_h5_tree_file(file);
    const Tensor* x = back.dataset("x");
    ASSERT_NE(x, nullptr) << piece;
    ASSERT_EQ(x->shape(), t.shape()) << piece;
    EXPECT_EQ(std::memcmp(x->raw(), t.raw(), t.nbytes()), 0) << "pieces of " << piece << " bytes";
  }
}

// Loading reads each tensor straight into its destination: the HDF5 helper streams the file's datasets through one
// staging buffer into a data file, and each weight and optimizer slot is read from there into its own memory. So
// loading a .keras file of W bytes of weights and optimizer state raises the measured peak by W (the model it
// builds) and no more, to within 1 MiB (scalars, shapes); loading into a model that already has its weights and
// slots raises it by nothing. The values come back bit for bit.
TEST(SaveMemory, LoadingReadsEachTensorIntoItsDestination) {
  const fs::path dir = temp_dir("load");
  std::unique_ptr<Model> m = std::make_unique<Sequential>(std::vector<LayerPtr>{
      layers::Input({784}), layers::Dense(1024, "relu"), layers::Dense(1024, "relu"), layers::Dense(10)});
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  auto [x, y] = batch_for(*m, 16);
  m->train_on_batch({x}, {y});
  const std::string file = (dir / "m.keras").string(), weights_file = (dir / "m.weights.h5").string();
  m->save(file);
  m->save_weights(weights_file);
  const std::vector<Tensor> w = m->get_weights();
  const std::vector<std::vector<Tensor>> slots = m->get_optimizer_slots();
  // W: the file's weights and Adam's two slots per weight, float32 (23 MiB here).
  const size_t W = static_cast<size_t>(m->count_params()) * 4 * 3;
  const size_t MiB = size_t{1} << 20;
  m.reset();

  const size_t before = config::get_memory_info().current;
  config::reset_peak_memory();
  std::unique_ptr<Model> back = models::load_model(file);
  const size_t rise = config::get_memory_info().peak - before;
  EXPECT_NEAR(static_cast<double>(rise), static_cast<double>(W), static_cast<double>(MiB))
      << "loading " << W << " bytes of weights raised the peak by " << rise;
  EXPECT_LE(rise, W + io::file_staging_capacity());
  EXPECT_NEAR(static_cast<double>(config::get_memory_info().current - before), static_cast<double>(W),
              static_cast<double>(MiB));

  // Into a model that holds its weights and slots already: nothing of their size is allocated.
  for (const std::string& f : {file, weights_file}) {
    const size_t held = config::get_memory_info().current;
    config::reset_peak_memory();
    back->load_weights(f);
    EXPECT_LE(config::get_memory_info().peak - held, MiB) << f;
    const std::vector<Tensor> w2 = back->get_weights();
    ASSERT_EQ(w.size(), w2.size());
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_EQ(std::memcmp(w[i].raw(), w2[i].raw(), w[i].nbytes()), 0) << f << ": weight " << i;
    const std::vector<std::vector<Tensor>> slots2 = back->get_optimizer_slots();
    ASSERT_EQ(slots.size(), slots2.size());
    for (size_t i = 0; i < slots.size(); ++i)
      for (size_t k = 0; k < slots[i].size(); ++k)
        EXPECT_EQ(std::memcmp(slots[i][k].raw(), slots2[i][k].raw(), slots[i][k].nbytes()), 0) << f << i << "/" << k;
    EXPECT_EQ(back->optimizer()->iterations(), 1);
  }
}

// The HDF5 helper reads a dataset larger than its staging buffer in blocks (rows of its trailing dimensions, or parts
// of its last one): every buffer size gives back the same values.
TEST(SaveMemory, TheHelperStreamsDatasetsThroughItsStagingBuffer) {
  const fs::path dir = temp_dir("blocks");
  Tensor t(Shape{3, 50, 7}, DType::f32), z(Shape{2, 100}, DType::f32);  // z: a row larger than 256 bytes
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i) * 0.25f - 7.0f;
  for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = static_cast<float>(i) * -0.5f;
  io::H5Tree tree;
  tree.groups.insert("");
  tree.datasets["x"] = t;
  tree.datasets["z"] = z;
  tree.datasets["s"] = Tensor::full(Shape{}, 2.5f);
  const std::string file = (dir / "b.h5").string();
  io::write_h5_tree_file(tree, file, file);
  for (size_t piece : {size_t{256}, size_t{300}, size_t{1400}, size_t{2000}, size_t{4200}, size_t{1} << 20}) {
    io::set_file_staging_capacity(piece);  // the helper's side, run in this process
    const std::string data = (dir / ("d" + std::to_string(piece))).string();
    std::fclose(std::fopen(data.c_str(), "wb"));
    const io::H5Tree lazy = io::read_h5_tree_file_in_process(file, file, data);
    ASSERT_EQ(lazy.stored.size(), 3u);
    EXPECT_TRUE(lazy.datasets.empty());
    EXPECT_EQ(lazy.info("x")->shape, t.shape());
    ASSERT_EQ(fs::file_size(data), t.nbytes() + z.nbytes() + 4) << "each dataset's bytes once, nothing else";
    std::ifstream in(data, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(std::memcmp(bytes.data() + lazy.stored.at("x").offset, t.raw(), t.nbytes()), 0) << piece << " bytes";
    EXPECT_EQ(std::memcmp(bytes.data() + lazy.stored.at("z").offset, z.raw(), z.nbytes()), 0) << piece << " bytes";
  }
  io::set_file_staging_capacity(io::kFileStagingBytes);
  const io::H5Tree back = io::open_h5_tree_file(file, file);
  Tensor x(Shape{3, 50, 7}, DType::f32);
  back.read_into("x", x, file);
  EXPECT_EQ(std::memcmp(x.raw(), t.raw(), t.nbytes()), 0);
  EXPECT_EQ(back.load("s", file).data<float>()[0], 2.5f);
  Tensor wrong(Shape{50, 3, 7}, DType::f32);
  EXPECT_THROW(back.read_into("x", wrong, file), FormatError);
  EXPECT_THROW(back.read_into("nothing", x, file), FormatError);
}

namespace {

size_t cli_peak(const std::string& out) {
  const size_t at = out.find("peak memory: ");
  return at == std::string::npos ? 0 : std::strtoull(out.c_str() + at + 13, nullptr, 10);
}
std::string line_with(const std::string& out, const std::string& key) {
  const size_t at = out.find(key);
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}
void expect_same_state(const std::string& a, const std::string& b) {
  std::unique_ptr<Model> ma = models::load_model(a), mb = models::load_model(b);
  const std::vector<Tensor> wa = ma->get_weights(), wb = mb->get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_EQ(std::memcmp(wa[i].raw(), wb[i].raw(), wa[i].nbytes()), 0) << a << " vs " << b << ": weight " << i;
  const auto sa = ma->get_optimizer_slots(), sb = mb->get_optimizer_slots();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i)
    for (size_t k = 0; k < sa[i].size(); ++k)
      EXPECT_EQ(std::memcmp(sa[i][k].raw(), sb[i][k].raw(), sa[i][k].nbytes()), 0) << a << " vs " << b;
  EXPECT_EQ(ma->optimizer()->iterations(), mb->optimizer()->iterations());
}

}  // namespace

// The 420 MiB case, scaled down: a fit that trains under a budget with no room for a copy of its weights and
// optimizer state saves its file, checkpoints and backs up under that budget; its peak with --save --checkpoint
// --backup-dir equals the peak without them (plan + data + the file-staging line, 0 on the cpu), and its files hold
// what an unlimited run's hold.
TEST(SaveMemory, AFitThatTrainsUnderABudgetAlsoSavesCheckpointsAndBacksUpUnderIt) {
  const std::string fit =
      "fit -v 0 --no-summary --epochs 2 --batch-size 32 --seed 3 --model dense:1024:relu,"
      "dense:1024:relu,dense:10" +
      plain_data().args();
  const Result plain = run_cli(fit + " --dump-weights " + quote(path_of("plain.txt")));
  ASSERT_EQ(plain.code, 0) << describe(plain);
  const size_t peak = cli_peak(plain.out);
  ASSERT_GT(peak, 0u) << plain.out;
  auto with_files = [&](const std::string& tag, const std::string& env) {
    return run_cli(fit + " --dump-weights " + quote(path_of(tag + ".txt")) + " --save " +
                       quote(path_of(tag + ".keras")) + " --checkpoint " + quote(path_of(tag + "_ckpt.keras")) +
                       " --backup-dir " + quote(path_of(tag + "_backup")) + " --keep-backup",
                   env);
  };
  const Result unlimited = with_files("unlimited", "");
  ASSERT_EQ(unlimited.code, 0) << describe(unlimited);
  EXPECT_EQ(cli_peak(unlimited.out), peak) << "saving, checkpointing and backing up took memory beyond the plan";

  // A budget 4 MiB above what training alone reserves: the model's weights and Adam state (22 MiB) could not be
  // copied in it.
  const size_t weights = (784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10) * 4;
  const size_t limit = (peak + (size_t{6} << 20)) / (size_t{2} << 20) * (size_t{2} << 20);
  EXPECT_LT(limit, peak + 3 * weights);
  const Result limited = with_files("limited", "TK_MEMORY_LIMIT=" + std::to_string(limit));
  ASSERT_EQ(limited.code, 0) << describe(limited);
  EXPECT_EQ(cli_peak(limited.out), peak);
  EXPECT_EQ(line_with(limited.out, "test_accuracy"), line_with(plain.out, "test_accuracy"));
  EXPECT_EQ(read_text(path_of("limited.txt")), read_text(path_of("plain.txt")));
  EXPECT_EQ(read_text(path_of("unlimited.txt")), read_text(path_of("plain.txt")));
  expect_same_state(path_of("limited.keras"), path_of("unlimited.keras"));
  expect_same_state(path_of("limited_ckpt.keras"), path_of("unlimited_ckpt.keras"));
  EXPECT_EQ(read_text(path_of("limited_backup/latest.tkstate")), read_text(path_of("unlimited_backup/latest.tkstate")));
}

// Planning a model file reads its config alone: a model whose training does not fit the budget still plans (exit 3,
// "does NOT fit"), where loading it whole runs out of memory, and that OOM is about the file: file advice, never a
// smaller batch size.
TEST(SaveMemory, PlanningAModelFileReadsNoWeightsAndLoadingOomsGetFileAdvice) {
  std::unique_ptr<Model> m = std::make_unique<Sequential>(std::vector<LayerPtr>{
      layers::Input({784}), layers::Dense(2048, "relu"), layers::Dense(2048, "relu"), layers::Dense(10)});
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  const std::string file = path_of("big.keras");  // 23 MiB of weights, 46 MiB of Adam state (initial values)
  m->save(file);
  const Result plan = run_cli("plan --model " + quote(file) + " --batch-size 32", "TK_MEMORY_LIMIT=48MiB");
  EXPECT_EQ(plan.code, 3) << describe(plan);
  EXPECT_CONTAINS(plan.out, "does NOT fit");
  EXPECT_CONTAINS(plan.out, "file staging");
  const Result load =
      run_cli("fit -v 0 --epochs 1 --model " + quote(file) + plain_data().args(), "TK_MEMORY_LIMIT=48MiB");
  EXPECT_EQ(load.code, 1) << describe(load);
  for (const char* part : {"OOM when allocating", "part of loading", "big.keras", "not the training step"})
    EXPECT_CONTAINS(load.err, part);
  EXPECT_FALSE(contains(load.err, "(1) a smaller batch size")) << load.err;
  EXPECT_FALSE(contains(load.err, "(unnamed tensor)")) << load.err;
}

// The VGG16 (keras.applications.VGG16(weights=None, input_shape=(32, 32, 3), classes=10): 33.6M parameters, 134
// MB of weights), built the same shape from the C++ API: it plans under 600 MiB at batch 32, `trainkit plan` plans its
// .keras file under a 600 MiB budget (no weights read, no optimizer state, no arena), and the file, saved with its
// Adam state, loads compiled under it.
namespace {
std::unique_ptr<Model> vgg16_shaped() {
  using namespace layers;
  std::vector<LayerPtr> l{layers::Input({32, 32, 3})};
  for (const auto& [filters, convs] :
       std::vector<std::pair<int64_t, int>>{{64, 2}, {128, 2}, {256, 3}, {512, 3}, {512, 3}}) {
    for (int i = 0; i < convs; ++i) l.push_back(Conv2D(filters, 3, "relu", {.padding = "same"}));
    l.push_back(MaxPooling2D(2));
  }
  for (LayerPtr layer : {Flatten(), Dense(4096, "relu"), Dense(4096, "relu"), Dense(10)}) l.push_back(layer);
  return std::make_unique<Sequential>(l, "vgg16");
}
}  // namespace

TEST(SaveMemory, Vgg16ShapedModelPlansUnderSixHundredMebibytesAndLoads) {
  std::unique_ptr<Model> m = vgg16_shaped();
  EXPECT_EQ(m->count_params(), 33638218)
      << "keras.applications.VGG16(weights=None, input_shape=(32, 32, 3), classes=10)";
  const std::string file = path_of("vgg16.keras");
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  m->save(file);  // with Adam's state (its initial values: HDF5 fill values), 385 MiB of weights in all
  const MemoryPlan plan = m->memory_plan(32);
  EXPECT_LT(plan.total, size_t{600} << 20) << plan.to_string();
  EXPECT_EQ(plan.file_staging, 0u);
  m.reset();
  const Result r = run_cli("plan --model " + quote(file) + " --batch-size 32", "TK_MEMORY_LIMIT=600MiB");
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "Batch 32 fits");
  // Loading it compiled reads 128 MiB of weights and 257 MiB of Adam state into place: before streaming loads, the
  // whole member and a parsed copy of it came first (OOM at 600 MiB).
  const Result load = run_cli("summary " + quote(file), "TK_MEMORY_LIMIT=600MiB");
  EXPECT_EQ(load.code, 0) << describe(load);
  EXPECT_CONTAINS(load.out, "33,638,218");
  EXPECT_CONTAINS(load.out, "optimizer Adam");
}

// ONNX export streams: the nodes are held encoded (kilobytes), and each weight's raw_data goes from its own memory
// into the file (a convolution kernel transposed on the way, through a 16 KiB piece). So exporting 10 MiB of weights
// allocates no tensor (the file-staging line: 0 on the cpu) and less than 256 KiB of heap (measured: 92 KiB, the
// 64 KiB write buffer and the graph's messages and names), where a copy of the weights or of the whole protobuf took 20
// MiB and more. The bytes are those of serializing the model in memory: tests/test_onnx_export.cpp compares every
// committed .onnx file.
TEST(SaveMemory, OnnxExportWritesEachWeightFromItsOwnMemory) {
  using namespace layers;
  const fs::path dir = temp_dir("onnx");
  std::unique_ptr<Model> m = std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({8, 8, 64}), Conv2D(256, 3, "relu"), BatchNormalization(), Flatten(),
                            Dense(256, "relu"), Dense(10)});
  m->predict(Tensor::zeros(Shape{1, 8, 8, 64}));
  const size_t weights = static_cast<size_t>(m->count_params()) * 4;
  ASSERT_GT(weights, size_t{9} << 20);
  const std::string file = (dir / "m.onnx").string();
  m->export_onnx(file);  // the first export traces the predict program; the second is measured
  const std::string first = read_text(file);
  const size_t before = config::get_memory_info().current;
  const int64_t heap_before = tk::testing::heap_bytes();
  config::reset_peak_memory();
  tk::testing::reset_heap_peak();
  m->export_onnx(file);
  const int64_t heap_rise = tk::testing::heap_peak() - heap_before;
  EXPECT_EQ(config::get_memory_info().peak, before) << "the export allocated a tensor";
  EXPECT_LT(heap_rise, int64_t{256} << 10)
      << "exporting " << weights << " bytes of weights held " << heap_rise << " bytes of heap at once";
  EXPECT_EQ(read_text(file), first);
  EXPECT_GT(fs::file_size(file), weights - 2 * 256 * 4) << "every weight (BatchNormalization's four vectors as two)";
}

// A convolution kernel's bytes in ONNX's order, from its own memory or staged as a GPU's kernel is (a host tensor
// forced through that path), for staging buffers that hold several columns, one, or less than one column of every
// row: the same bytes as the transposition written out, and the staging buffer is the only tensor allocated.
TEST(SaveMemory, ConvolutionKernelsStreamTransposedThroughTheStagingBuffer) {
  Tensor w(Shape{3, 3, 10, 7}, DType::f32);  // (KH, KW, C, F): 90 rows of 7 columns
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(i) * 0.5f - 9.0f;
  std::vector<float> want;  // (F, C, KH, KW)
  for (int64_t f = 0; f < 7; ++f)
    for (int64_t c = 0; c < 10; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) want.push_back(w.data<float>()[((i * 3 + j) * 10 + c) * 7 + f]);
  for (size_t capacity : {size_t{256}, size_t{1000}, size_t{2000}, size_t{1} << 20}) {
    io::set_file_staging_capacity(capacity);
    for (bool staged : {false, true}) {
      std::string bytes;
      const size_t before = config::get_memory_info().current;
      config::reset_peak_memory();
      io::onnx::conv_kernel_bytes(w, "m.onnx", "conv/kernel", staged,
                                  [&](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); });
      // One column of 90 rows is 360 bytes: capacity / 360 columns (at least 1, at most 7); allocations are
      // 256-byte aligned.
      const size_t cols = std::clamp<size_t>(capacity / 360, 1, 7);
      EXPECT_EQ(config::get_memory_info().peak - before, staged ? (cols * 360 + 255) / 256 * 256 : 0) << capacity;
      ASSERT_EQ(bytes.size(), want.size() * 4) << capacity << (staged ? " staged" : "");
      EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0) << capacity << (staged ? " staged" : "");
    }
  }
  io::set_file_staging_capacity(io::kFileStagingBytes);
}

namespace {
struct PinCalls {
  int pins = 0, unpins = 0;
  void* p = nullptr;
  size_t bytes = 0;
} pin_calls;
}  // namespace

// The host side of pinned staging (the GPU side: tests/test_cuda_save.cpp): a staging buffer for a device's tensor
// asks that device's backend to page-lock it (graph::Backend::pin_host, through the hook the backends' registration
// sets) and to unlock it before it is freed; one for the cpu asks nothing. Either way it is a cpu tensor charged to
// the budget under the file's owner tag, which the plan's file-staging line counts.
TEST(SaveMemory, StagingBuffersForADeviceArePinnedByItsBackendAndCharged) {
  static const io::HostPinning fake{[](Device, void* p, size_t n) {
                                      ++pin_calls.pins, pin_calls.p = p, pin_calls.bytes = n;
                                      return true;
                                    },
                                    [](Device, void* p) {
                                      ++pin_calls.unpins;
                                      EXPECT_EQ(p, pin_calls.p);
                                    }};
  const io::HostPinning* real = io::set_host_pinning(&fake);
  EXPECT_NE(real, nullptr) << "the backends' registration sets the hook";
  const size_t before = config::get_memory_info().current;
  {
    io::StagingBuffer b(size_t{1} << 20, Device::cuda(0), "m.keras", "dense/kernel");
    EXPECT_TRUE(b.pinned());
    EXPECT_EQ(pin_calls.pins, 1);
    EXPECT_EQ(pin_calls.p, b.data());
    EXPECT_EQ(pin_calls.bytes, size_t{1} << 20);
    EXPECT_EQ(pin_calls.unpins, 0);
    EXPECT_EQ(config::get_memory_info().current - before, size_t{1} << 20);
    io::StagingBuffer host(4096, Device::cpu(), "m.keras", "dense/bias");
    EXPECT_FALSE(host.pinned());
    EXPECT_EQ(pin_calls.pins, 1) << "the cpu's memory is the host's: nothing to pin";
  }
  EXPECT_EQ(pin_calls.unpins, 1);
  EXPECT_EQ(config::get_memory_info().current, before);
  io::set_host_pinning(real);
}

// The last VGG16 claim (label slow: ctest runs it as vgg16_fit_peak, 13 s in Release on 2 threads, 530 MB;
// skipped unless TK_SLOW_TESTS=1): the model saved with its Adam state loads, and one epoch of fit over 64 images at
// batch 32 peaks at the plan plus the data (the issue asks within 1 MiB; it is to the byte: 504.78 MiB + 0.75 MiB,
// measured 2026-12-06) — loading leaves nothing behind, and fit allocates nothing the plan does not show.
TEST(SaveMemory, Vgg16ShapedModelLoadsAndItsFitPeakIsThePlanPlusTheData) {
  if (!std::getenv("TK_SLOW_TESTS")) GTEST_SKIP() << "set TK_SLOW_TESTS=1 (ctest runs it as vgg16_fit_peak)";
  const std::string file = path_of("vgg16_fit.keras");
  {
    std::unique_ptr<Model> m = vgg16_shaped();
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    m->save(file);
  }
  const size_t baseline = config::get_memory_info().current;
  config::reset_peak_memory();
  Tensor x(Shape{64, 32, 32, 3}, DType::f32), y(Shape{64}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919) % 101) / 101.0f;
  for (int64_t i = 0; i < 64; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  const size_t data = x.nbytes() + y.nbytes();  // 0.75 MiB
  std::unique_ptr<Model> m = models::load_model(file);
  const MemoryPlan plan = m->memory_plan(32);
  EXPECT_LT(plan.total, size_t{600} << 20) << plan.to_string();
  const History h = m->fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0});
  const size_t peak = config::get_memory_info().peak - baseline;
  std::printf("[ memory ] vgg16-shaped fit, batch 32: plan %zu + data %zu = %zu bytes, peak %zu bytes (%+lld)\n",
              plan.total, data, plan.total + data, peak,
              static_cast<long long>(peak) - static_cast<long long>(plan.total + data));
  EXPECT_EQ(peak, plan.total + data) << plan.to_string();
  EXPECT_EQ(h.history.at("loss").size(), 1u);
}

// batch_size=auto with a checkpoint and a backup (issue 36): the largest batch that fits fills the budget to within
// kilobytes, and the callbacks still save, since a save needs no room on the device the batch is chosen for (the cpu
// writes each tensor from its own memory, the plan's file-staging line is 0; a GPU's slots stage through the host,
// outside the GPU's budget). The same batch is chosen with and without them, and the peak is the same.
TEST(SaveMemory, AutoBatchSizeLeavesRoomForCheckpointsAndBackups) {
  static const DataFiles data = [] {
    Split train = make_split(2048, 5), test = make_split(64, 6);
    return DataFiles{write_file("auto-train-images", train.images), write_file("auto-train-labels", train.labels),
                     write_file("auto-test-images", test.images), write_file("auto-test-labels", test.labels)};
  }();
  const std::string fit = "fit -v 1 --no-summary --epochs 1 --seed 3 --batch-size auto --model dense:1024:relu," +
                          std::string("dense:1024:relu,dense:10") + data.args();
  const std::string env = "TK_MEMORY_LIMIT=40MiB";
  const Result plain = run_cli(fit, env);
  ASSERT_EQ(plain.code, 0) << describe(plain);
  const std::string chosen = line_with(plain.out, "batch_size auto:");
  ASSERT_NE(chosen, "") << plain.out;
  EXPECT_LT(std::strtoll(chosen.c_str() + 16, nullptr, 10), 2048) << "the budget, not the data, limits the batch";
  const Result saving =
      run_cli(fit + " --checkpoint " + quote(path_of("auto_ckpt.keras")) + " --backup-dir " +
                  quote(path_of("auto_backup")) + " --keep-backup --save " + quote(path_of("auto.keras")),
              env);
  ASSERT_EQ(saving.code, 0) << describe(saving);
  EXPECT_EQ(line_with(saving.out, "batch_size auto:"), chosen);
  EXPECT_EQ(cli_peak(saving.out), cli_peak(plain.out));
  EXPECT_CONTAINS(saving.out, "saving model to");
  EXPECT_TRUE(fs::exists(path_of("auto_ckpt.keras")));
  EXPECT_TRUE(fs::exists(path_of("auto_backup/latest.tkstate")));
  EXPECT_TRUE(fs::exists(path_of("auto.keras")));
}
