// `trainkit fit` on token ids (issue 32): an NPZ whose x holds int32 token ids trains a Keras text CNN file and a
// --model spec that starts with an Embedding; an id beyond the vocabulary is one clear error.
#include <gtest/gtest.h>

#include <string>

#include "cli_run.h"
#include "trainkit/io/keras.h"
#include "trainkit/trainkit.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)

const std::string kTokens = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/text_cnn/tokens.npz";

TEST(CliTokens, FitsAKerasTextCnnOnIntegerTokenIds) {
  const std::string out = path_of("text_cnn_fit.keras");
  const Result r = run_cli(
      "fit --model " + quote(std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/text_cnn/" + "text_cnn.keras") +
      " --data " + quote(kTokens) + " --epochs 1 --batch-size 8 -v 0 --no-summary --save " + quote(out));
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::unique_ptr<tk::Model> m = tk::models::load_model(out, /*compile=*/false);
  EXPECT_EQ(m->input_dtype(0), tk::DType::i32);
}

TEST(CliTokens, FitsAnEmbeddingSpecAndRefusesIdsBeyondTheVocabulary) {
  const Result r = run_cli("fit --model embedding:200:8,conv1d:8:3:relu:causal,globalmaxpool1d,dense:3 --data " +
                           quote(kTokens) + " --epochs 1 --batch-size 8 -v 0 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  // tokens.npz holds ids up to 199: a vocabulary of 50 is too small (the error names the layer, the row, the size).
  expect_user_error(run_cli("fit --model embedding:50:8,globalavgpool1d,dense:3 --data " + quote(kTokens) +
                            " --epochs 1 --batch-size 8 -v 0 --no-summary"),
                    {"embedding", "50 rows", "of the batch"});
  expect_user_error(run_cli("fit --model embedding:0:8,dense:3 --data " + quote(kTokens) + " --epochs 1"),
                    {"--model", "embedding"});
}

// The recurrent spec items (issue 32): a Bidirectional LSTM over every step, then a GRU; a bad one names its item.
TEST(CliTokens, FitsARecurrentSpec) {
  const Result r = run_cli("fit --model embedding:200:8,bilstm:8:seq,gru:6,dense:3 --data " + quote(kTokens) +
                           " --epochs 1 --batch-size 8 -v 0 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  expect_user_error(run_cli("fit --model embedding:200:8,lstm:4:last,dense:3 --data " + quote(kTokens) + " --epochs 1"),
                    {"--model", "lstm", "seq"});
}

}  // namespace
