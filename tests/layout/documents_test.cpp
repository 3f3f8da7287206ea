// The segment rule of packed documents (engine/layout/documents.h) on hand-worked rows: segments,
// per-document positions, crossing labels, attention pairs and the starts rule. Integer
// arithmetic only. defines: test cases [documents]
#include <catch2/catch.hpp>

#include "engine/layout/documents.h"

using namespace odyssey;

TEST_CASE("documents: a row's segments cover the sequence, a leading continuation its own", "[documents]") {
  using Segs = std::vector<DocumentSegment>;
  CHECK(document_segments({}, 8) == Segs{{0, 8}});
  CHECK(document_segments({0}, 8) == Segs{{0, 8}});
  CHECK(document_segments({0, 3, 5}, 8) == Segs{{0, 3}, {3, 2}, {5, 3}});
  CHECK(document_segments({2, 7}, 8) == Segs{{0, 2}, {2, 5}, {7, 1}});  // [0, 2) continues an earlier document
  CHECK_THROWS_WITH(document_segments({3, 3}, 8), Catch::Contains("ascend without repeats (3 then 3)"));
  CHECK_THROWS_WITH(document_segments({8}, 8), Catch::Contains("start 8 lies outside the sequence [0, 8)"));
  CHECK_THROWS_WITH(document_segments({-1}, 8), Catch::Contains("outside"));
}

TEST_CASE("documents: positions restart at each start, a shard's from its first position", "[documents]") {
  CHECK(positions_in_documents({0, 3, 5}, 0, 8) == std::vector<int64_t>{0, 1, 2, 0, 1, 0, 1, 2});
  CHECK(positions_in_documents({2, 7}, 0, 8) == std::vector<int64_t>{0, 1, 0, 1, 2, 3, 4, 0});
  CHECK(positions_in_documents({2, 7}, 4, 4) == std::vector<int64_t>{2, 3, 4, 0});  // sequence shard 1 of 2
  CHECK(positions_in_documents({}, 4, 4) == std::vector<int64_t>{4, 5, 6, 7});      // no documents: global
}

TEST_CASE("documents: a label crosses when the next token starts a document", "[documents]") {
  const std::vector<int64_t> starts{0, 3, 5};
  std::vector<int> crossing;
  for (int64_t p = 0; p < 8; ++p) crossing.push_back(label_crosses_document(starts, false, p, 8));
  CHECK(crossing == std::vector<int>{0, 0, 1, 0, 1, 0, 0, 0});
  CHECK(label_crosses_document(starts, true, 7, 8));  // the token after the sequence begins a document
  CHECK_FALSE(label_crosses_document({}, false, 7, 8));
}

TEST_CASE("documents: causal attention pairs are the segments' triangles", "[documents]") {
  CHECK(causal_attention_pairs({}, 8) == 36);                // 8 x 9 / 2
  CHECK(causal_attention_pairs({0, 3, 5}, 8) == 6 + 3 + 6);  // 3, 2, 3 tokens
  CHECK(causal_attention_pairs({2, 7}, 8) == 3 + 15 + 1);    // 2, 5, 1 tokens
  DocumentSpans none, some{{{}, {4}}};
  CHECK_FALSE(none.any());
  CHECK_FALSE(DocumentSpans{{{}, {}}}.any());
  CHECK(some.any());
}

TEST_CASE("documents: the attention fraction of a length profile, by hand", "[documents]") {
  // Documents of 2, 4 and 10 tokens (16): at S = 4 the first two are triangles 3 + 10, the 10-token
  // one is split into pieces of 4 at 2.5 pairs a token (25), against 16 x 2.5 = 40 over whole sequences.
  const DocumentLengthProfile profile({10, 2, 4});
  CHECK(profile.documents() == 3);
  CHECK(profile.attention_fraction(4) == Approx((3.0 + 10.0 + 25.0) / 40.0).epsilon(1e-12));
  // At S = 16 every document is a triangle: 3 + 10 + 55 pairs against 16 x 8.5.
  CHECK(profile.attention_fraction(16) == Approx(68.0 / 136.0).epsilon(1e-12));
  // One document per sequence at S = 1: every token its own triangle, as without documents.
  CHECK(profile.attention_fraction(1) == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("documents: the longest attention segment is the shorter of the longest document and the row",
          "[documents]") {
  const DocumentLengthProfile profile({10, 2, 4});
  CHECK(profile.longest() == 10);
  CHECK(longest_attention_segment(&profile, 4) == 4);    // the 10-token document fills rows of 4
  CHECK(longest_attention_segment(&profile, 16) == 10);  // no segment outgrows its document
  // no profile, or one without documents: any document may fill a row
  CHECK(longest_attention_segment(nullptr, 16) == 16);
  const DocumentLengthProfile empty({});
  CHECK(empty.longest() == 0);
  CHECK(longest_attention_segment(&empty, 16) == 16);
}
