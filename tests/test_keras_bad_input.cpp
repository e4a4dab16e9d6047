// Bad Keras files: each is one tk::Error naming the file and what is wrong, and nothing is half-loaded.
// The cases are made from the Keras fixture cnn.keras by editing one member; a sweep of byte mutations and
// truncations at the end checks that nothing but tk::Error ever comes out of the loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "trainkit/io/keras.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
using io::keras::json;

std::string fixture(const std::string& name) { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class KerasBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tk_keras_bad_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    base_ = io::keras::read_archive(fixture("cnn.keras"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write_archive(const std::string& name, const io::keras::Archive& a) {
    return write(name, io::keras::write_archive(a));
  }
  // The archive with config.json edited by `edit`.
  std::string with_config(const std::string& name, const std::function<void(json&)>& edit) {
    io::keras::Archive a = base_;
    json c = json::parse(a.config);
    edit(c);
    a.config = c.dump();
    return write_archive(name, a);
  }
  std::string with_weights(const std::string& name, const std::function<void(io::H5Tree&)>& edit) {
    io::keras::Archive a = base_;
    io::H5Tree t = io::read_h5_tree_image("w", a.weights.data(), a.weights.size());
    edit(t);
    a.weights = io::write_h5_tree(t);
    return write_archive(name, a);
  }
  // The one error load_model gives, with its type checked.
  template <typename E>
  std::string error_of(const std::string& path) {
    try {
      models::load_model(path);
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
      return {};
    }
    ADD_FAILURE() << path << " loaded";
    return {};
  }
  fs::path dir_;
  io::keras::Archive base_;
};

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(KerasBadInput, TruncatedZip) {
  const std::string bytes = read_bytes(fixture("cnn.keras"));
  for (size_t keep : {size_t{0}, size_t{10}, size_t{100}, bytes.size() / 2, bytes.size() - 10}) {
    const std::string p = write("cut.keras", bytes.substr(0, keep));
    const std::string e = error_of<FormatError>(p);
    EXPECT_HAS(e, p + ": not a readable .keras archive (zip)");
    EXPECT_HAS(e, "save it again");
  }
}

TEST_F(KerasBadInput, CorruptMemberBytesFailTheCrc) {
  std::string bytes = read_bytes(fixture("cnn.keras"));
  const size_t at = bytes.find("batch_normalization");  // inside config.json (stored, not compressed)
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'X';
  const std::string e = error_of<FormatError>(write("crc.keras", bytes));
  EXPECT_HAS(e, "cannot read member 'config.json' to its end");
  EXPECT_HAS(e, "CRC");
}

TEST_F(KerasBadInput, MissingMember) {
  io::keras::Archive a = base_;
  a.weights.clear();
  const std::string e = error_of<FormatError>(write_archive("noweights.keras", a));
  EXPECT_HAS(e, "model.weights.h5");
}

TEST_F(KerasBadInput, NotJson) {
  io::keras::Archive a = base_;
  a.config = "{\"class_name\": \"Functional\", \"config\": {";
  const std::string e = error_of<FormatError>(write_archive("json.keras", a));
  EXPECT_HAS(e, "json.keras: config.json: not valid JSON at byte 41");
}

TEST_F(KerasBadInput, UnknownKerasVersion) {
  io::keras::Archive a = base_;
  for (const std::string v : {"4.0.0", "2.15.0"}) {
    a.metadata = "{\"keras_version\": \"" + v + "\", \"date_saved\": \"2026-01-01@00:00:00\"}";
    const std::string e = error_of<Unsupported>(write_archive("v.keras", a));
    EXPECT_HAS(e, "written by Keras " + v + ", a version trainkit does not read");
  }
}

TEST_F(KerasBadInput, UnknownLayerClassNamesLayerClassAndWhatIsSupported) {
  // (LSTM was this example until trainkit had it; ConvLSTM2D it has not.)
  const std::string p =
      with_config("convlstm.keras", [](json& c) { c["config"]["layers"][3]["class_name"] = "ConvLSTM2D"; });
  const std::string e = error_of<Unsupported>(p);
  EXPECT_HAS(e,
             "layer 'activation' (ConvLSTM2D): trainkit has no layer class 'ConvLSTM2D' (supported: InputLayer, Dense");
}

TEST_F(KerasBadInput, UnknownOrUnsupportedOptionNamesIt) {
  std::string e = error_of<Unsupported>(with_config("reg.keras", [](json& c) {
    c["config"]["layers"][6]["config"]["kernel_constraint"] = {{"class_name", "RadialConstraint"},
                                                               {"config", {{"max_value", 2}}}};
  }));
  EXPECT_HAS(e, "layer 'dense_3' (Dense): option 'kernel_constraint'");
  e = error_of<Unsupported>(
      with_config("opt.keras", [](json& c) { c["config"]["layers"][1]["config"]["frobnicate"] = 1; }));
  EXPECT_HAS(e, "layer 'conv2d' (Conv2D): option 'frobnicate' = 1 is not one trainkit knows for Conv2D");
  e = error_of<Unsupported>(
      with_config("cf.keras", [](json& c) { c["config"]["layers"][1]["config"]["data_format"] = "channels_first"; }));
  EXPECT_HAS(e, "option 'data_format' = \"channels_first\" is not supported by trainkit");
  e = error_of<Unsupported>(
      with_config("half.keras", [](json& c) { c["config"]["layers"][6]["config"]["dtype"] = "float16"; }));
  EXPECT_HAS(e, "dtype policy 'float16' is not supported");  // 16-bit variables (mixed policies load)
  e = error_of<FormatError>(
      with_config("type.keras", [](json& c) { c["config"]["layers"][6]["config"]["units"] = "ten"; }));
  EXPECT_HAS(e, "layer 'dense_3' (Dense): option 'units' must be an integer");
  e = error_of<Unsupported>(
      with_config("optim.keras", [](json& c) { c["compile_config"]["optimizer"]["class_name"] = "Ftrl"; }));
  EXPECT_HAS(e, "optimizer class 'Ftrl' is not one trainkit has");
}

TEST_F(KerasBadInput, MissingVariable) {
  const std::string e = error_of<FormatError>(
      with_weights("missing.keras", [](io::H5Tree& t) { t.datasets.erase("layers/dense/vars/1"); }));
  EXPECT_HAS(e, "'/layers/dense/vars' holds 1 variables, layer 'dense_3' (Dense) has 2");
}

TEST_F(KerasBadInput, MisshapenVariable) {
  std::string e = error_of<FormatError>(with_weights("shape.keras", [](io::H5Tree& t) {
    t.datasets["layers/dense/vars/0"] = Tensor::zeros(Shape{1352, 11});
  }));
  EXPECT_HAS(e, "weight 'dense_3/kernel' is (1352, 10) float32 in the model but (1352, 11) in the file");
  e = error_of<FormatError>(
      with_weights("opt.keras", [](io::H5Tree& t) { t.datasets["optimizer/vars/3"] = Tensor::zeros(Shape{2}); }));
  EXPECT_HAS(e, "optimizer variable '/optimizer/vars/3' should be (3, 3, 1, 8) float32");
}

TEST_F(KerasBadInput, NothingIsHalfLoaded) {
  std::unique_ptr<Model> m = models::load_model(fixture("cnn.keras"));
  const std::vector<Tensor> before = m->get_weights();
  const std::string p = with_weights("late.weights.keras", [](io::H5Tree& t) {
    t.datasets["layers/dense/vars/1"] = Tensor::zeros(Shape{3});                 // the last weight is wrong
    t.datasets["layers/conv2d/vars/0"] = Tensor::full(Shape{3, 3, 1, 8}, 7.0f);  // the first is fine
  });
  EXPECT_THROW(m->load_weights(p), FormatError);
  const std::vector<Tensor> after = m->get_weights();
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(std::memcmp(before[i].raw(), after[i].raw(), before[i].nbytes()), 0) << "weight " << i << " changed";
}

TEST_F(KerasBadInput, DamagedHdf5Member) {
  io::keras::Archive a = base_;
  a.weights = a.weights.substr(0, a.weights.size() / 3);
  std::string e = error_of<FormatError>(write_archive("h5cut.keras", a));
  EXPECT_HAS(e, "model.weights.h5");
  a.weights = "not hdf5 at all";
  e = error_of<FormatError>(write_archive("h5not.keras", a));
  EXPECT_HAS(e, "model.weights.h5: not an HDF5 file");
}

// libhdf5 1.10.8 crashes on these (fuzz/known_crashes/): as Keras weights they are one error, not a crash.
TEST_F(KerasBadInput, Hdf5ThatCrashesLibhdf5IsAnError) {
  const std::string crasher =
      std::string(TK_SOURCE_DIR) + "/fuzz/known_crashes/hdf5_old_format/SEGV-H5Lvisit-0xf54de.h5";
  io::keras::Archive a = base_;
  a.weights = read_bytes(crasher);
  std::string e = error_of<FormatError>(write_archive("crash.keras", a));
  EXPECT_HAS(e, "crash.keras: model.weights.h5: libhdf5 ");
  EXPECT_HAS(e, "in trainkit's helper process");
  std::unique_ptr<Model> m = models::load_model(fixture("cnn.keras"));
  const std::string w = write("crash.weights.h5", read_bytes(crasher));
  try {
    m->load_weights(w);
    ADD_FAILURE() << "loaded";
  } catch (const FormatError& err) {
    EXPECT_HAS(std::string(err.what()), w + ": libhdf5 ");
  }
}

// The helper's answer is parsed defensively: truncations and byte edits are FormatError.
TEST_F(KerasBadInput, HelperAnswerParserRejectsDamage) {
  io::H5Tree t = io::read_h5_tree_image("w", base_.weights.data(), base_.weights.size());
  const std::string good = io::serialize_h5_tree(t);
  EXPECT_EQ(io::parse_h5_tree(good, "x").datasets.size(), t.datasets.size());
  std::mt19937 rng(5);
  int errors = 0;
  for (int i = 0; i < 300; ++i) {
    std::string b = i % 2 ? good.substr(0, rng() % good.size()) : good;
    if (i % 2 == 0)
      for (int k = 0; k < 4; ++k) b[rng() % std::min<size_t>(b.size(), 4096)] = static_cast<char>(rng());
    try {
      io::parse_h5_tree(b, "x");
    } catch (const FormatError&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 150);
}

// Random single-byte edits of config.json and of the whole file, and truncations: only tk::Error, ever.
TEST_F(KerasBadInput, MutationSweepOnlyEverThrowsTkError) {
  std::mt19937 rng(11);
  const std::string whole = read_bytes(fixture("cnn.keras"));
  int errors = 0, loaded = 0;
  auto attempt = [&](const std::string& path) {
    try {
      models::load_model(path);
      ++loaded;
    } catch (const Error&) {
      ++errors;
    }  // anything else escapes and fails the test
  };
  for (int i = 0; i < 80; ++i) {
    io::keras::Archive a = base_;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const char charset[] = "{}[],:\"0123456789-.eE ntfalsrue_aZ\\";
      a.config[rng() % a.config.size()] = charset[rng() % (sizeof charset - 1)];
    }
    attempt(write_archive("m.keras", a));
  }
  for (int i = 0; i < 30; ++i) {
    std::string b = whole;
    b[rng() % b.size()] = static_cast<char>(rng());
    attempt(write("b.keras", b));
    attempt(write("t.keras", whole.substr(0, rng() % whole.size())));
  }
  EXPECT_GT(errors, 0);
  std::cout << "mutations: " << errors << " errors, " << loaded << " loaded\n";
}

}  // namespace
}  // namespace tk
