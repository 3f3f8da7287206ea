// A tokenizer.json's vocabulary counted as `tokenizers` counts it (engine/train/tokenizer_vocabulary.h):
// the model's vocabulary of each kind and the added tokens, sparse ids, and malformed files named.
// defines: test cases [tokenizer]
#include <catch2/catch.hpp>

#include "engine/train/tokenizer_vocabulary.h"

using namespace odyssey;

TEST_CASE("tokenizer vocabulary: the largest id plus one or the distinct tokens, whichever is more", "[tokenizer]") {
  // WordLevel/BPE: token -> id; added tokens beyond it (Llama 3's 128000 + 256 specials).
  CHECK(tokenizer_vocabulary(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2}},
                                 "added_tokens": [{"id": 3, "content": "<s>"}, {"id": 4, "content": "</s>"}]})",
                             "t.json") == 5);
  // An added token that is also in the vocabulary counts once.
  CHECK(tokenizer_vocabulary(
            R"({"model": {"vocab": {"a": 0, "<s>": 1}}, "added_tokens": [{"id": 1, "content": "<s>"}]})", "t.json") ==
        2);
  // Sparse ids: an id past the count sets the size (every id below it is one the file may hold).
  CHECK(tokenizer_vocabulary(R"({"model": {"vocab": {"a": 0, "b": 7}}, "added_tokens": []})", "t.json") == 8);
  // Unigram: [token, score] pairs, each id its index; added tokens after them.
  CHECK(tokenizer_vocabulary(R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.5], ["b", -2.0]]},
                                 "added_tokens": [{"id": 3, "content": "<pad>"}]})",
                             "t.json") == 4);
  // A token listed twice takes its last index, as `tokenizers` 0.23 maps it (get_vocab: a -> 3),
  // so `odyssey prepare`'s files of it hold id 3: 4, not the 3 distinct tokens. An added token
  // that is the repeated one keeps that id, and a new one comes after the list (5).
  CHECK(tokenizer_vocabulary(
            R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["a", -1], ["b", -1], ["a", -2]]}})", "t.json") ==
        4);
  CHECK(tokenizer_vocabulary(R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["a", -1], ["b", -1], ["a", -2]]},
                                 "added_tokens": [{"id": 9, "content": "a"}, {"id": 9, "content": "<x>"}]})",
                             "t.json") == 5);
  // No added_tokens at all: the model's vocabulary alone.
  CHECK(tokenizer_vocabulary(R"({"model": {"vocab": {"a": 0, "b": 1}}})", "t.json") == 2);
  // An added token's "id" is the file's word, not the library's: `tokenizers` gives the first new
  // one the model's size (2, not 10) and the next one past it; an empty one is left out.
  CHECK(tokenizer_vocabulary(R"({"model": {"vocab": {"a": 0, "b": 1}},
                                 "added_tokens": [{"id": 10, "content": "<s>"}, {"id": 3, "content": ""},
                                                  {"id": 50, "content": "</s>"}]})",
                             "t.json") == 4);
  // Behind a sparse vocabulary (size 2, largest id 7) the first new added token takes the size, 2.
  CHECK(tokenizer_vocabulary(R"({"model": {"vocab": {"a": 0, "b": 7}}, "added_tokens": [{"id": 8, "content": "<s>"}]})",
                             "t.json") == 8);
}

TEST_CASE("tokenizer token ids: each token's id as tokenizers loads the file", "[tokenizer]") {
  // (what an export numbers tokenizer_config.json's bos/eos/pad tokens by) the model's tokens keep
  // theirs; an added token in the vocabulary keeps the vocabulary's; a new one takes the size, then
  // the next, whatever the file's "id" says
  const auto ids = tokenizer_token_ids(R"({"model": {"vocab": {"a": 0, "<s>": 1, "b": 2}},
                                          "added_tokens": [{"id": 7, "content": "<s>"}, {"id": 40, "content": "</s>"},
                                                           {"id": 41, "content": "<pad>"}]})",
                                       "t.json");
  CHECK(ids.size() == 5);
  CHECK(ids.at("a") == 0);
  CHECK(ids.at("<s>") == 1);
  CHECK(ids.at("b") == 2);
  CHECK(ids.at("</s>") == 3);
  CHECK(ids.at("<pad>") == 4);
}

TEST_CASE("tokenizer vocabulary: a malformed tokenizer.json names the file and what is wrong", "[tokenizer]") {
  CHECK_THROWS_WITH(tokenizer_vocabulary("{broken", "m/tokenizer.json"),
                    Catch::Contains("m/tokenizer.json: parse error, not JSON"));
  CHECK_THROWS_WITH(tokenizer_vocabulary(R"({"added_tokens": []})", "m/tokenizer.json"),
                    Catch::Contains("m/tokenizer.json: no \"model\" object"));
  CHECK_THROWS_WITH(tokenizer_vocabulary(R"({"model": {"vocab": {"a": -1}}})", "t.json"),
                    Catch::Contains("maps a to -1, not an id >= 0"));
  CHECK_THROWS_WITH(tokenizer_vocabulary(R"({"model": {"vocab": 3}})", "t.json"),
                    Catch::Contains("neither an object nor a list"));
  CHECK_THROWS_WITH(tokenizer_vocabulary(R"({"model": {"vocab": {}}, "added_tokens": [{"id": 1}]})", "t.json"),
                    Catch::Contains("without a \"content\" string"));
  CHECK(!model_tokenizer_vocabulary("").has_value());                    // no model directory
  CHECK(!model_tokenizer_vocabulary("/nonexistent/model").has_value());  // none in it
}
