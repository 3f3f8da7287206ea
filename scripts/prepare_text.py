# Tokenizes text for `odyssey prepare` with the Hugging Face `tokenizers` library: the odyssey binary
# runs this script (embedded in it) with the project's Python and writes the documents file itself.
#
# usage (by odyssey): python -c SCRIPT --tokenizer FILE [--append-eos]
#   stdin:  the inputs, NUL-separated pairs KIND\0PATH\0 (KIND: jsonl, text, parquet)
#   stdout: records, little-endian, each a one-byte tag and its payload:
#     b"T" u64 vocab_size, i64 eos_id (-1: none), u32 n, n bytes UTF-8: the eos token's text and source
#     b"F" u32 file: the inputs' file number `file` begins
#     b"D" u32 n, n x u32: one document's tokens (n may be 0: text without tokens)
#     b"P" u32 file, u64 bytes: that many bytes of the file are read
#     b"E" u32 n, n bytes UTF-8: bad input ("FILE:LINE: rule"), then exit 2
#     b"Z" u64 documents: the end, with the count of D records
# Nothing else is written to stdout; a crash leaves its traceback on stderr and exit 1.
import array
import json
import os
import re
import struct
import sys

BATCH_DOCUMENTS = 512            # documents per encode_batch call (tokenizers runs them in parallel)
BATCH_BYTES = 8 << 20            # or this many bytes of text, whichever comes first
# Memory: `tokenizers` holds about 150 bytes for each byte of the text one encode call is given
# (ids, offsets, token strings), so a 1 GB document encoded whole would need about 150 GB. A
# document longer than PIECE_CHARS is encoded in pieces of about that many characters, cut only
# where the text around the cut (SEAM_CHARS each side) tokenizes the same together and apart.
# ODYSSEY_PREPARE_PIECE_CHARS sets it (the tests cut small documents with it).
PIECE_CHARS = os.environ.get("ODYSSEY_PREPARE_PIECE_CHARS", str(1 << 20))
SEAM_CHARS = 4096
SEAM_TRIES = 8  # cuts refused before any was accepted: the document is encoded whole
# A cut goes after a line break between two non-space characters: the pre-tokenizers of byte-level
# BPE (GPT-2's, Llama 3's) end a token there and begin one after it, whatever came before (a blank
# line is no cut: GPT-2's tokenizes "\n\n" at the end of a text otherwise than before a word).
# The seam check covers the tokenizers this does not hold for.
CUT_AFTER = re.compile(r"(?<=\S)\r?\n(?=\S)")
# Spellings of an end-of-sequence token, used when no tokenizer_config.json names one.
EOS_SPELLINGS = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|eos|>")

out = sys.stdout.buffer


class BadInput(Exception):
    """The input is wrong (exit 2): the message names the file, the line and the rule."""


def record(tag, payload=b""):
    out.write(tag + payload)


def text_payload(text):
    # surrogateescape: a file name that is not UTF-8 (os.fsdecode's lone surrogates) goes out as its bytes
    data = text.encode("utf-8", "surrogateescape")
    return struct.pack("<I", len(data)) + data


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        sys.stderr.write("odyssey prepare: the Python at %s cannot import `tokenizers` (%s): install it there "
                         "(pip install tokenizers) or set ODYSSEY_PYTHON to a Python that has it\n" % (sys.executable, e))
        sys.exit(1)
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as e:  # the library's own parse errors: one line, the file named
        raise BadInput("--tokenizer %s: not a tokenizer.json the tokenizers library reads (%s)" %
                       (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    # A tokenizer.json saved with truncation or padding on would cut every document to its
    # max_length, or add pad tokens: a training file holds each document whole, as written.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def find_eos(tokenizer, path):
    """(id, description) of the end-of-sequence token, or (-1, why there is none)."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    if os.path.isfile(config):
        try:
            with open(config, "rb") as f:
                eos = json.loads(f.read().decode("utf-8")).get("eos_token")
        except (ValueError, UnicodeDecodeError, AttributeError) as e:
            raise BadInput("%s: not a JSON object (%s)" % (config, e))
        if isinstance(eos, dict):
            eos = eos.get("content")
        if eos is not None and not isinstance(eos, str):  # neither absent nor a token: not a silent fallback
            raise BadInput("%s: eos_token %s is not a token (a string, or an object whose \"content\" is one)"
                           % (config, shown_json(eos)))
        if isinstance(eos, str):
            eos_id = tokenizer.token_to_id(eos)
            if eos_id is None:
                raise BadInput("%s: eos_token %s is not a token of %s" % (config, json.dumps(eos), path))
            return eos_id, "%s (id %d, eos_token of %s)" % (eos, eos_id, config)
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    found = [s for s in EOS_SPELLINGS if s in special]
    if len(found) == 1:
        eos_id = tokenizer.token_to_id(found[0])
        return eos_id, "%s (id %d, the tokenizer's special token of that name)" % (found[0], eos_id)
    return -1, ("%s names no eos_token (no tokenizer_config.json beside it with one), and %s" %
                (path, "its special tokens hold none of " + ", ".join(EOS_SPELLINGS) if not found
                 else "it has several: " + ", ".join(found)))


def vocabulary_size(tokenizer):
    # Every id the tokenizer can produce is below this (added tokens included, ids may be sparse).
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    return max(tokenizer.get_vocab_size(with_added_tokens=True), max(ids, default=-1) + 1)


def value_kind(value):
    """How a message names a value that should have been a string (JSON's words where they fit)."""
    if value is None:
        return "null"
    if isinstance(value, dict):  # json_object, the reader's dict with its key count
        return "an object"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object",
            str: "a string", bytes: "bytes"}.get(type(value), "a " + type(value).__name__)


def shown_json(value, limit=60):
    """A value as JSON, cut to `limit` characters, for a message."""
    text = json.dumps(value)  # \u escapes: a lone surrogate (no Unicode character) cannot break the message
    return text if len(text) <= limit else text[:limit] + "..."


def checked_text(text, where):
    """`text` when it can be encoded as UTF-8 (a JSON \\ud800 escape gives a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput("%s: \"text\" holds a lone surrogate \\u%04x at character %d: not a Unicode character"
                       % (where, ord(text[e.start]), e.start))
    return text


def utf8(data, where_line):
    """data decoded as UTF-8, or BadInput naming the line and byte of the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start)
        start = data.rfind(b"\n", 0, e.start) + 1
        raise BadInput("%s: not UTF-8: byte 0x%02x at column %d is invalid (%s)" %
                       (where_line(line), data[e.start], e.start - start + 1, e.reason))


class JsonObject(dict):
    """A JSON object that counts how often its "text" key was written (json.loads keeps the last)."""
    text_given = 0


def json_object(pairs):
    obj = JsonObject(pairs)
    obj.text_given = sum(1 for key, _ in pairs if key == "text")
    return obj


def jsonl_documents(path, file_number):
    """(text, bytes read) for each non-blank line of a JSON-lines file."""
    done = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            done += len(raw)
            where = "%s:%d" % (path, number)
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark is not text
            line = utf8(raw, lambda _: where)
            if not line.strip(" \t\r\n"):  # JSON's whitespace: U+0085 or \v is no blank line
                continue
            try:
                value = json.loads(line, object_pairs_hook=json_object)
            except (ValueError, RecursionError) as e:
                hint = " (a .json file is read as JSON lines: one object per line)" if path.endswith(".json") else ""
                what = "nested too deeply" if isinstance(e, RecursionError) else (
                    "%s (column %d)" % (e.msg, e.colno) if hasattr(e, "colno") else str(e))
                raise BadInput("%s: invalid JSON: %s%s" % (where, what, hint))
            if not isinstance(value, dict):
                raise BadInput("%s: a JSON object with a \"text\" string field is expected, got %s: %s" %
                               (where, value_kind(value), shown_json(value)))
            if value.text_given > 1:  # which one was meant is unknowable: the last would win unsaid
                raise BadInput("%s: \"text\" is given %d times in one object: give it once"
                               % (where, value.text_given))
            if "text" not in value:
                keys = ", ".join(json.dumps(k) for k in list(value)[:8])
                raise BadInput("%s: no \"text\" field (the object has %s)" % (where, keys or "no keys"))
            text = value["text"]
            if not isinstance(text, str):
                raise BadInput("%s: \"text\" is %s, not a string" % (where, value_kind(text)))
            yield checked_text(text, where), done


def text_documents(path, file_number):
    """A plain text file is one document."""
    with open(path, "rb") as f:
        data = f.read()
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    text = utf8(body, lambda line: "%s:%d" % (path, line + 1))
    yield text, len(data)


# The rule a Parquet input follows, quoted by every message about one.
PARQUET_RULE = "a Parquet input is one document a row, the row's \"text\" string"


def import_pyarrow(path):
    """pyarrow.parquet, or exit 1 (a missing library is the environment's failure, not the input's)."""
    try:
        import pyarrow.parquet
        return pyarrow.parquet
    except ImportError as e:
        sys.stderr.write("odyssey prepare: %s is a Parquet file, and the Python at %s cannot import `pyarrow` (%s): "
                         "`make deps` installs it in the project's venv (or pip install pyarrow there, or set "
                         "ODYSSEY_PYTHON to a Python that has it)\n" % (path, sys.executable, e))
        sys.exit(1)


def is_string_type(arrow_type):
    import pyarrow as pa
    string_view = getattr(pa.types, "is_string_view", lambda t: False)
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or string_view(arrow_type)


def parquet_documents(path, file_number):
    """(text, bytes read, as a share of the file) for each row of a Parquet file's "text" column."""
    pq = import_pyarrow(path)
    import pyarrow as pa
    try:
        table = pq.ParquetFile(path)
    except Exception as e:
        raise BadInput("%s: not a Parquet file pyarrow reads (%s)" % (path, str(e).splitlines()[0] if str(e) else e))
    schema = table.schema_arrow
    if "text" not in schema.names:
        raise BadInput("%s: no \"text\" column (the columns are %s; %s)" %
                       (path, ", ".join(json.dumps(n) for n in schema.names[:8]) or "none", PARQUET_RULE))
    if schema.names.count("text") > 1:
        raise BadInput("%s: %d columns are named \"text\" (%s)" % (path, schema.names.count("text"), PARQUET_RULE))
    column_type = schema.field("text").type
    rows = max(table.metadata.num_rows, 1)
    size = os.path.getsize(path)
    row = 0
    batches = table.iter_batches(columns=["text"], batch_size=1024)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as e:
            raise BadInput("%s: pyarrow cannot read the rows after row %d (%s)" % (path, row, e))
        if batch is None:
            return
        column = batch.column(0)
        try:
            values = column.to_pylist()
        except UnicodeDecodeError:  # a string column whose bytes are not UTF-8: find the row
            for offset, data in enumerate(column.cast(pa.binary()).to_pylist()):
                if data is not None:
                    utf8(data, lambda line: "%s:row %d, line %d of \"text\"" % (path, row + offset + 1, line + 1))
            raise
        for text in values:
            row += 1
            where = "%s:row %d" % (path, row)
            if not isinstance(text, str):
                shown = "" if text is None else " (%s)" % repr(text)[:40]
                of_type = "" if is_string_type(column_type) else " in a column of %s" % column_type
                raise BadInput("%s: \"text\" is %s%s%s, not a string (%s)" %
                               (where, value_kind(text), shown, of_type, PARQUET_RULE))
            yield checked_text(text, where), size * row // rows


READERS = {"jsonl": jsonl_documents, "text": text_documents, "parquet": parquet_documents}


def same_tokens_apart(tokenizer, text, cut):
    """Whether `text` cut at `cut` tokenizes as the two sides apart, judged on SEAM_CHARS each side."""
    left, right = text[max(0, cut - SEAM_CHARS):cut], text[cut:cut + SEAM_CHARS]
    whole, left_ids, right_ids = (e.ids for e in tokenizer.encode_batch([left + right, left, right],
                                                                        add_special_tokens=False))
    return whole == left_ids + right_ids


def pieces(tokenizer, text):
    """`text` as pieces of about PIECE_CHARS characters (made one at a time) whose tokens, one after
    the other, are the tokens of `text` encoded whole. A stretch without a cut the seam check accepts
    makes its piece longer; a tokenizer that accepts none of a document's first SEAM_TRIES cuts (one
    that marks the start of a text, say) encodes the document whole."""
    start, end, accepted, refused = 0, PIECE_CHARS, 0, 0
    while len(text) - start > PIECE_CHARS and end < len(text):
        # The last accepted cut in the piece's second half: a piece never shrinks below half.
        cuts = [m.end() for m in CUT_AFTER.finditer(text, max(start, end - PIECE_CHARS // 2), end)][-SEAM_TRIES:]
        cut = None
        for candidate in reversed(cuts):
            if same_tokens_apart(tokenizer, text, candidate):
                cut = candidate
                break
            refused += 1
        if cut is None:
            if accepted == 0 and refused >= SEAM_TRIES:
                break
            end += PIECE_CHARS // 2  # no cut here: the next stretch's line breaks
            continue
        accepted += 1
        yield text[start:cut]
        start, end = cut, cut + PIECE_CHARS
    yield text[start:] if start else text


def encode(tokenizer, texts, eos_id):
    """The records of a batch of documents: their tokens, the eos after each when eos_id >= 0.
    Each encode_batch call gets at most about BATCH_BYTES of text (a long document's pieces in turn)."""
    documents = [array.array("I") for _ in texts]
    call, size = [], 0

    def run(call):
        encodings = tokenizer.encode_batch([piece for _, piece in call], add_special_tokens=False)
        for (number, _), encoding in zip(call, encodings):
            documents[number].extend(encoding.ids)

    for number, text in enumerate(texts):
        for piece in pieces(tokenizer, text):
            if call and size + len(piece) > BATCH_BYTES:
                run(call)
                call, size = [], 0
            call.append((number, piece))
            size += len(piece)
    if call:
        run(call)
    chunk = bytearray()
    for ids in documents:
        if len(ids) and eos_id >= 0:
            ids.append(eos_id)
        if sys.byteorder == "big":
            ids.byteswap()
        chunk += b"D" + struct.pack("<I", len(ids)) + ids.tobytes()
    return bytes(chunk)


def main(argv):
    tokenizer_path, append_eos = None, False
    i = 0
    while i < len(argv):
        if argv[i] == "--tokenizer" and i + 1 < len(argv):
            tokenizer_path = argv[i + 1]
            i += 2
        elif argv[i] == "--append-eos":
            append_eos = True
            i += 1
        else:
            sys.stderr.write("prepare_text.py: unknown argument %r\n" % argv[i])
            return 1
    assert array.array("I").itemsize == 4, "array('I') is not 32-bit here"
    global PIECE_CHARS
    if not PIECE_CHARS.isdigit() or int(PIECE_CHARS) < 1:
        sys.stderr.write("odyssey prepare: ODYSSEY_PREPARE_PIECE_CHARS=%s: must be a whole number of characters "
                         "above 0 (the longest text one tokenizer call is given)\n" % PIECE_CHARS)
        return 1
    PIECE_CHARS = int(PIECE_CHARS)
    parts = sys.stdin.buffer.read().split(b"\0")
    inputs = [(parts[k].decode(), os.fsdecode(parts[k + 1])) for k in range(0, len(parts) - 1, 2)]
    documents = 0
    try:
        tokenizer = load_tokenizer(tokenizer_path)
        # The eos token is looked for only when it is appended: without --append-eos a
        # tokenizer_config.json beside the tokenizer is not read, so a bad one cannot stop prepare.
        eos_id, eos_text = find_eos(tokenizer, tokenizer_path) if append_eos else (-1, "")
        if append_eos and eos_id < 0:
            raise BadInput("--append-eos: the tokenizer has no eos token: " + eos_text)
        appended = eos_id if append_eos else -1
        record(b"T", struct.pack("<Qq", vocabulary_size(tokenizer), appended) + text_payload(eos_text))
        parquet = [path for kind, path in inputs if kind == "parquet"]
        if parquet:
            import_pyarrow(parquet[0])  # before any file is tokenized
        for number, (kind, path) in enumerate(inputs):
            record(b"F", struct.pack("<I", number))
            texts, size = [], 0
            for text, done in READERS[kind](path, number):
                texts.append(text)
                size += len(text)
                if len(texts) >= BATCH_DOCUMENTS or size >= BATCH_BYTES:
                    out.write(encode(tokenizer, texts, appended))
                    record(b"P", struct.pack("<IQ", number, done))
                    out.flush()  # the progress bar moves now, not when a buffer fills
                    documents += len(texts)
                    texts, size = [], 0
            if texts:
                out.write(encode(tokenizer, texts, appended))
                documents += len(texts)
            record(b"P", struct.pack("<IQ", number, os.path.getsize(path)))
            out.flush()
        record(b"Z", struct.pack("<Q", documents))
    except BadInput as e:
        record(b"E", text_payload(str(e)))
        out.flush()
        return 2
    except OSError as e:  # a file that went away or cannot be read since odyssey listed it
        record(b"E", text_payload("%s: cannot read (%s)" % (e.filename or "input", e.strerror or e)))
        out.flush()
        return 2
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
