// The documents file that `odyssey prepare` writes and the documents dataset reads: tokenized text
// with its document boundaries. defines: the format's constants, DocumentsFileWriter, DocumentsFile,
// read_document_lengths
//
// Layout (little-endian, no padding; version 1):
//   offset  bytes     field
//   0       8         magic "ODYDOCS" and a zero byte
//   8       4         version (uint32) = 1
//   12      4         token_dtype (uint32) = 1: uint32 tokens, the only dtype of version 1
//   16      8         token_count T (uint64)
//   24      8         document_count D (uint64), at least 1
//   32      8         vocab_size (uint64): the tokenizer's, every token is below it
//   40      24        reserved, zero
//   64      8(D+1)    document index (uint64): document d is tokens [index[d], index[d+1]);
//                     index[0] = 0, strictly increasing (no empty document), index[D] = T
//   64+8(D+1)  4T     the tokens (uint32)
// The file is exactly 64 + 8(D+1) + 4T bytes: a byte more or less is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/layout/documents.h"
#include "engine/train/data_file.h"

namespace odyssey {

constexpr char kDocumentsMagic[8] = {'O', 'D', 'Y', 'D', 'O', 'C', 'S', '\0'};
constexpr uint32_t kDocumentsVersion = 1;
constexpr uint32_t kDocumentsTokenUint32 = 1;  ///< token_dtype: uint32
constexpr int64_t kDocumentsHeaderBytes = 64;

/// Writes a documents file whole or not at all: tokens go to a private temporary beside `path`
/// (`.NAME.XXXXXX.tokens`), and commit() writes header, index and tokens to a second one, syncs
/// it and moves it to `path`; destroyed uncommitted (an error, Ctrl-C) it removes both, so nothing
/// is left behind. Usage: DocumentsFileWriter w(path); w.add_document(ids, n); ...; w.commit(vocab, false);
class DocumentsFileWriter {
 public:
  /// Throws FileWriteError (the folder is missing or not writable), naming `path`.
  explicit DocumentsFileWriter(std::string path);
  ~DocumentsFileWriter();
  DocumentsFileWriter(const DocumentsFileWriter&) = delete;
  DocumentsFileWriter& operator=(const DocumentsFileWriter&) = delete;

  /// Appends one document of n >= 1 tokens (std::invalid_argument for n < 1: the index has no
  /// empty document).
  void add_document(const uint32_t* tokens, int64_t n);
  /// Finishes the file at `path`. Refuses (std::invalid_argument) no document, or a token
  /// >= vocab_size. `replace`: an existing `path` is replaced (atomically); otherwise a file that
  /// appeared there meanwhile is kept and FileWriteError names it.
  void commit(int64_t vocab_size, bool replace);

  /// The document index so far: D + 1 offsets, from 0 to the token count.
  const std::vector<int64_t>& index() const { return index_; }
  int64_t token_count() const { return index_.back(); }
  int64_t max_token() const { return max_token_; }  ///< -1 before the first token

 private:
  void flush();
  std::string path_, tokens_tmp_, file_tmp_;
  int tokens_fd_ = -1;
  std::vector<uint32_t> buffer_;  // tokens not yet written (at most kWriteBufferTokens)
  std::vector<int64_t> index_{0};
  int64_t max_token_ = -1;
  bool committed_ = false;
};

/// A documents file opened for reading, every field checked before it is used: the header
/// (magic, version, token_dtype, the reserved bytes, the counts against the file's size, exactly),
/// the whole index (read in bounded chunks) and every token (below the header's vocab_size).
/// Any failure is a DataError naming the file, the field and its value. Reads are pread.
class DocumentsFile {
 public:
  /// `model_vocab`: the model's vocabulary (model.vocab_size); a header vocab_size above it (the
  /// file was tokenized for another model) is refused with both numbers. 0 skips that check.
  DocumentsFile(const std::string& path, int64_t model_vocab);

  int64_t token_count() const { return index_.back(); }
  int64_t document_count() const { return static_cast<int64_t>(index_.size()) - 1; }
  int64_t vocab_size() const { return vocab_size_; }
  /// D + 1 offsets: document d is tokens [index()[d], index()[d + 1]).
  const std::vector<int64_t>& index() const { return index_; }
  int64_t document_length(int64_t d) const { return index_[d + 1] - index_[d]; }
  /// Tokens [first, first + n) into out (one pread). A token >= vocab_size now (none was at open)
  /// or a file that shrank throws DataChangedError.
  void read_tokens(int64_t first, int64_t n, int64_t* out) const;
  const std::string& path() const { return file_.path(); }

 private:
  DataFile file_;
  int64_t vocab_size_ = 0;
  int64_t tokens_offset_ = 0;  // byte offset of token 0
  std::vector<int64_t> index_;
};

/// The document lengths of the documents file at `path` (opened and checked as DocumentsFile
/// does, DataError naming it) as the planner's profile: what plan, maxlen, ladder and tune count
/// attention pairs from under training.document_mask.
std::shared_ptr<const DocumentLengthProfile> read_document_lengths(const std::string& path, int64_t model_vocab);

}  // namespace odyssey
