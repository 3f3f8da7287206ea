# Tokenizes text for `odyssey prepare` with the Hugging Face `tokenizers` library: the odyssey binary
# runs this script (embedded in it) with the project's Python and writes the documents file itself.
#
# usage (by odyssey): python -c SCRIPT --tokenizer FILE [--append-eos] [--match-special-tokens]
#   stdin:  the inputs, NUL-separated pairs KIND\0PATH\0 (KIND: jsonl, text, parquet)
#   stdout: records, little-endian, each a one-byte tag and its payload:
#     b"T" u64 vocab_size, i64 eos_id (-1: none), u32 n, n bytes UTF-8: the eos token's text and source
#     b"F" u32 file: the inputs' file number `file` begins
#     b"D" u32 n, n x u32: one document's tokens (n may be 0: text without tokens)
#     b"P" u32 file, u64 bytes: that many bytes of the file are read
#     b"E" u32 n, n bytes UTF-8: bad input ("FILE:LINE: rule"), then exit 2
#     b"Z" u64 documents: the end, with the count of D records
# Nothing else is written to stdout; a crash leaves its traceback on stderr and exit 1. odyssey
# takes an E record as bad input (exit 2) whatever the exit status.
import array
import json
import os
import re
import struct
import sys
import unicodedata

BATCH_DOCUMENTS = 512            # documents per encode_batch call (tokenizers runs them in parallel)
BATCH_BYTES = 8 << 20            # or this many bytes of text, whichever comes first
# Memory: `tokenizers` holds about 150 bytes for each byte of the text one encode call is given
# (ids, offsets, token strings), so a 1 GB document encoded whole would need about 150 GB. A
# document longer than PIECE_CHARS is encoded in pieces of about that many characters, cut only
# where the text around the cut (SEAM_CHARS each side) tokenizes the same together and apart.
# ODYSSEY_PREPARE_PIECE_CHARS sets it (the tests cut small documents with it).
PIECE_CHARS = os.environ.get("ODYSSEY_PREPARE_PIECE_CHARS", str(1 << 20))
SEAM_CHARS = 4096
SEAM_TRIES = 8  # cuts of one kind refused before one of that kind was accepted: that kind is given up
# A cut goes after a line break between two non-space characters: the pre-tokenizers of byte-level
# BPE (GPT-2's, Llama 3's) end a token there and begin one after it, whatever came before.
CUT_AFTER = re.compile(r"(?<=\S)\r?\n(?=\S)")
# Text whose paragraphs are parted by blank lines only has no such break: there a cut goes in a run
# of two or more line breaks between non-space characters, at one of two places, since the
# tokenizers split that run differently: after the whole run (Llama 3's regex makes "\n\n" one
# pre-token, so no cut inside it is right there), or before its last character (GPT-2's regex splits
# "\n\n" before a word into "\n", "\n", but keeps "\n\n" at the end of a text whole). Single line
# breaks are tried first, as they always were. The seam check guards every cut, and covers the
# tokenizers none of this holds for.
CUT_IN_BLANK = re.compile(r"(?<=\S)(?:\r?\n){2,}(?=\S)")
# Text with no line break where one is taken (one long line: minified text, a JSON line's "text",
# line ends of "\r" alone) is cut before a space between two non-space characters: byte-level
# BPE's pre-tokenizers begin a token with the space before a word (" word"), whatever came before.
CUT_BEFORE_SPACE = re.compile(r"(?<=\S) (?=\S)")
# Spellings of an end-of-sequence token, used when no tokenizer_config.json names one.
EOS_SPELLINGS = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|eos|>")
TOKENIZER_PATH = ""  # --tokenizer, for messages
# Whether each encoding's offsets are checked for text the tokenizer dropped (may_drop_text): only a
# tokenizer that can drop text pays for the check.
CHECK_DROPPED = False

out = sys.stdout.buffer


class BadInput(Exception):
    """The input is wrong (exit 2): the message names the file, the line and the rule."""


class TokenizerFailed(Exception):
    """The tokenizers library raised while encoding: its one-line message (the tokenizer.json is
    bad input, named with the text it failed on by the caller, who knows where that text is from)."""


def record(tag, payload=b""):
    out.write(tag + payload)


def text_payload(text):
    # surrogateescape: a file name that is not UTF-8 (os.fsdecode's lone surrogates) goes out as its bytes
    data = text.encode("utf-8", "surrogateescape")
    return struct.pack("<I", len(data)) + data


def load_tokenizer(path, match_special):
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
    # The text of a special token inside a document ("<|endoftext|>" written in a web page) is text:
    # matched as the token, it would be an eos (or bos) the document never had, one --append-eos
    # cannot be told from. Encoded as plain text, an eos id in the file is one --append-eos put
    # there (by id, not by text). Added tokens that are not special are still matched as tokens.
    # --match-special-tokens: chat-formatted data whose markup means the tokens keeps them.
    if match_special:
        if hasattr(tokenizer, "encode_special_tokens"):  # older libraries match them always
            tokenizer.encode_special_tokens = False
        return tokenizer
    if not hasattr(tokenizer, "encode_special_tokens"):
        import tokenizers
        sys.stderr.write("odyssey prepare: the tokenizers library of the Python at %s is %s, which cannot encode "
                         "special-token text as plain text (Tokenizer.encode_special_tokens): install "
                         "tokenizers 0.23.3 there (`make deps`) or set ODYSSEY_PYTHON to a Python that has it\n"
                         % (sys.executable, getattr(tokenizers, "__version__", "of an unknown version")))
        sys.exit(1)
    tokenizer.encode_special_tokens = True
    return tokenizer


def parts_of(component, key):
    """A normalizer or pre-tokenizer of a tokenizer.json and, for a Sequence, its parts, flattened."""
    if not isinstance(component, dict):
        return []
    return [component] + [p for part in component.get(key) or [] for p in parts_of(part, key)]


def may_drop_text(tokenizer):
    """Whether the tokenizer's model can leave characters out with no token for them, unsaid: a BPE
    without an unk token (an unknown character is skipped), unless every byte has a token (byte
    fallback's <0x00>..<0xFF>, or a byte-level BPE's 256 characters). The other models give their unk
    token, or raise (a missing unk token), which encode() reports."""
    from tokenizers import pre_tokenizers
    spec = json.loads(tokenizer.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("unk_token") is not None:
        return False
    vocab = model.get("vocab") or {}
    if model.get("byte_fallback") and all("<0x%02X>" % b in vocab for b in range(256)):
        return False
    parts = parts_of(spec.get("normalizer"), "normalizers") + parts_of(spec.get("pre_tokenizer"), "pretokenizers")
    byte_level = any(part.get("type") == "ByteLevel" for part in parts)
    return not (byte_level and not model.get("continuing_subword_prefix") and not model.get("end_of_word_suffix")
                and all(c in vocab for c in pre_tokenizers.ByteLevel.alphabet()))


def find_eos(tokenizer, path):
    """(id, description) of the end-of-sequence token, or (-1, why there is none)."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    if os.path.lexists(config) and not os.path.isfile(config):  # there, but no file to read: not "absent"
        raise BadInput("%s: not a regular file (a directory, FIFO, device or a link to none): its eos_token "
                       "cannot be read; remove it or make it the tokenizer's tokenizer_config.json" % config)
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
    return {bool: "a boolean", int: "a number", float: "a number", LongInteger: "a number", list: "an array",
            dict: "an object", str: "a string", bytes: "bytes"}.get(type(value), "a " + type(value).__name__)


def shown_json(value, limit=60):
    """A value as JSON, cut to `limit` characters, for a message."""
    # \u escapes: a lone surrogate (no Unicode character) cannot break the message
    text = value.digits if isinstance(value, LongInteger) else json.dumps(value, default=lambda v: v.digits)
    return text if len(text) <= limit else text[:limit] + "..."


def checked_text(text, where):
    """`text` when it can be encoded as UTF-8 (a JSON \\ud800 escape gives a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput("%s: \"text\" holds a lone surrogate \\u%04x at character %d: not a Unicode character"
                       % (where, ord(text[e.start]), e.start + 1))  # counted from 1, as every message counts
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


def not_json(word):
    """json.loads takes NaN, Infinity and -Infinity, which JSON has not: a line holding one is no JSON."""
    raise ValueError("%s is not JSON (JSON has no NaN or Infinity)" % word)


class LongInteger:
    """A JSON integer too long for Python's int conversion (over 4300 digits, a guard against its
    quadratic cost): valid JSON, kept as its digits, since only "text" is read (never a string)."""

    def __init__(self, digits):
        self.digits = digits


def json_integer(digits):
    return LongInteger(digits) if len(digits) > 4000 else int(digits)


def in_field(where):
    """A document's `locate` (see encode) when it is the "text" of one line or row, named `where`."""
    return lambda index: (where, "character %d of its \"text\"" % (index + 1))


def in_file(path, text):
    """A document's `locate` when it is the whole text file `path`: the line and column of a character."""
    return lambda index: ("%s:%d" % (path, text.count("\n", 0, index) + 1),
                          "column %d" % (index - text.rfind("\n", 0, index)))


def jsonl_documents(path, file_number):
    """(text, bytes read, locate) for each non-blank line of a JSON-lines file."""
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
                value = json.loads(line, object_pairs_hook=json_object, parse_constant=not_json,
                                   parse_int=json_integer)
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
            yield checked_text(text, where), done, in_field(where)


def text_documents(path, file_number):
    """A plain text file is one document."""
    with open(path, "rb") as f:
        data = f.read()
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    text = utf8(body, lambda line: "%s:%d" % (path, line + 1))
    yield text, len(data), in_file(path, text)


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
    """(text, bytes read as a share of the file, locate) for each row of a Parquet file's "text" column."""
    pq = import_pyarrow(path)
    import pyarrow as pa
    try:
        try:  # a page whose checksum (written by the file's writer, when it wrote one) fails is refused
            table = pq.ParquetFile(path, page_checksum_verification=True)
        except TypeError:  # a pyarrow before 14 (ODYSSEY_PYTHON's own) cannot check them
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
            yield checked_text(text, where), size * row // rows, in_field(where)


READERS = {"jsonl": jsonl_documents, "text": text_documents, "parquet": parquet_documents}


def encode_batch(tokenizer, texts):
    """tokenizer.encode_batch without the tokenizer's own special tokens; a library error is
    TokenizerFailed (a MemoryError stays one: that is the machine's failure, not the input's)."""
    try:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    except MemoryError:
        raise
    except Exception as e:  # the library raises plain Exception ("WordLevel error: Missing [UNK] ...")
        raise TokenizerFailed(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)


def same_tokens_apart(tokenizer, text, cut):
    """Whether `text` cut at `cut` tokenizes as the two sides apart, judged on SEAM_CHARS each side."""
    left, right = text[max(0, cut - SEAM_CHARS):cut], text[cut:cut + SEAM_CHARS]
    whole, left_ids, right_ids = (e.ids for e in encode_batch(tokenizer, [left + right, left, right]))
    return whole == left_ids + right_ids


def single_line_cuts(text, lo, hi):
    return [m.end() for m in CUT_AFTER.finditer(text, lo, hi)]


def blank_line_cuts(text, lo, hi):
    # before the run's last character, its last "\n" (after the "\r" of a last "\r\n": GPT-2's regex
    # keeps "\r\n\r" together there), and after the run
    return [cut for m in CUT_IN_BLANK.finditer(text, lo, hi) for cut in (m.end() - 1, m.end())]


def word_cuts(text, lo, hi):
    return [m.start() for m in CUT_BEFORE_SPACE.finditer(text, lo, hi)]


CUT_KINDS = (single_line_cuts, blank_line_cuts, word_cuts)  # in the order they are tried


def pieces(tokenizer, text):
    """`text` as pieces of about PIECE_CHARS characters (made one at a time) whose tokens, one after
    the other, are the tokens of `text` encoded whole. A stretch without a cut the seam check accepts
    makes its piece longer. Each kind of cut (CUT_KINDS) is given up when the seam check refused
    SEAM_TRIES of it before accepting one; a tokenizer that gives up every kind (one that marks the
    start of every text, even one that starts with a space) encodes the document whole. The counts are the kind's own, so blank-line
    cuts a tokenizer refuses never give up, or stop sooner, the single-line cuts it takes."""
    half = max(1, PIECE_CHARS // 2)  # PIECE_CHARS 1 would make an empty window that never moves
    accepted, refused = [0] * len(CUT_KINDS), [0] * len(CUT_KINDS)

    def live(kind):
        return accepted[kind] > 0 or refused[kind] < SEAM_TRIES

    start, end = 0, PIECE_CHARS
    while len(text) - start > PIECE_CHARS and end < len(text):
        # The last accepted cut in the piece's second half: a piece never shrinks below half.
        lo, cut = max(start, end - half), None
        for kind, cuts_of in enumerate(CUT_KINDS):
            if not live(kind):
                continue
            for candidate in reversed(sorted(set(c for c in cuts_of(text, lo, end) if c > start))[-SEAM_TRIES:]):
                if same_tokens_apart(tokenizer, text, candidate):
                    cut = candidate
                    break
                refused[kind] += 1
            if cut is not None:
                accepted[kind] += 1
                break
        if cut is None:
            if not any(live(kind) for kind in range(len(CUT_KINDS))):
                break
            end += half  # no cut here: the next stretch's line breaks
            continue
        yield text[start:cut]
        start, end = cut, cut + PIECE_CHARS
    yield text[start:] if start else text


def unknown_chars(tokenizer, text):
    """The characters of `text`, after the tokenizer's normalizer and pre-tokenizer (what they take
    out is their rule, no loss), that its BPE model has no token for, in order, each once."""
    model, found = tokenizer.model, []
    try:
        if tokenizer.normalizer is not None:
            text = tokenizer.normalizer.normalize_str(text)
        pre_tokenizer = tokenizer.pre_tokenizer
        parts = [part for part, _ in pre_tokenizer.pre_tokenize_str(text)] if pre_tokenizer is not None else [text]
    except Exception:
        return ""
    prefix = getattr(model, "continuing_subword_prefix", None) or ""
    suffix = getattr(model, "end_of_word_suffix", None) or ""
    byte_fallback = getattr(model, "byte_fallback", False)
    for part in parts:
        for k, c in enumerate(part):
            # the symbol the BPE starts from for this character: inside a word with the
            # continuing-subword prefix, at a word's end with the end-of-word suffix
            symbol = (prefix if k else "") + c + (suffix if k == len(part) - 1 else "")
            if (c.isspace() or c in found or model.token_to_id(symbol) is not None
                    or (byte_fallback and all(model.token_to_id("<0x%02X>" % b) is not None for b in c.encode()))):
                continue
            found.append(c)
    return "".join(found)


def clusters(text, normalize=None):
    """(index, characters) of each character of `text` with what composes with it after it, white
    space left out: combining marks, and what `normalize` (the tokenizer's normalizer) makes one
    character of with it (Hangul jamo under NFKC have no combining class)."""
    out = []
    for k, c in enumerate(text):
        joined = out and out[-1][0] + len(out[-1][1]) == k and not c.isspace() and (
            unicodedata.combining(c) or (normalize is not None and len(normalize(out[-1][1] + c))
                                         < len(normalize(out[-1][1])) + len(normalize(c))))
        if joined:
            out[-1] = (out[-1][0], out[-1][1] + c)
        elif not c.isspace():
            out.append((k, c))
    return out


def first_dropped(tokenizer, text, encoding):
    """(index, characters) of the first characters of `text` the tokenizer dropped (`encoding` is
    its encoding), or None. A stretch no token's offsets cover that holds a character other than
    white space (a pre-tokenizer may leave white space out: Whitespace's, or a trimmed offset) is
    looked into: a BPE that drops a character it has no token for shifts the offsets of the rest of
    the word back, so the stretch shows at the word's end; a normalizer that composes "e" and U+0301
    into "é" leaves U+0301 uncovered too, and one may remove characters. So the word up to the stretch
    is run through the normalizer and pre-tokenizer, and what the model has no token for is dropped."""
    offsets, covered = encoding.offsets, 0
    for start, end in offsets:  # the common case, every stretch covered, at the least cost
        if start > covered and not text[covered:start].isspace():
            break
        if end > covered:
            covered = end
    else:
        if covered >= len(text) or text[covered:].isspace():
            return None
    covered, checked, words = 0, 0, None
    for k, (start, end) in enumerate(offsets + [(len(text), len(text))]):
        if start > covered and not text[covered:start].isspace():
            words = words or encoding.word_ids
            lo = covered  # back to the word's first token, or to the last stretch looked into
            if k and words[k - 1] is not None:
                j = k - 1
                while j and words[j - 1] == words[k - 1] and offsets[j][0] > checked:
                    j -= 1
                lo = min(lo, offsets[j][0])
            lo = max(lo, checked - 8)  # a few characters before: a composed pair is seen whole
            while lo > 0 and unicodedata.combining(text[lo]):  # with its base character
                lo -= 1
            if unknown_chars(tokenizer, text[lo:start]):
                # Named by character with its combining marks (a normalizer may compose them: "e"
                # and U+0301 into "é", which has a token): as the text has them where the model has
                # no token for them (a byte-level BPE's characters are bytes), the whole character as
                # written where only its composed form has none, else as the normalizer made them.
                stretch, chars, first = text[lo:start], "", None
                normalizer = tokenizer.normalizer
                for at, cluster in clusters(stretch, normalizer.normalize_str if normalizer is not None else None):
                    missing = unknown_chars(tokenizer, cluster)
                    if not missing:
                        continue
                    named = "".join(c for c in cluster if c in missing) or cluster
                    if first is None:
                        first = lo + at + cluster.index(named[0])
                    chars += "".join(dict.fromkeys(c for c in named if c not in chars))
                    if len(chars) > 16:  # as many as a message shows
                        break
                if first is None:  # none alone: one inside a word ("t" has a token, "##t" none)
                    chars = unknown_chars(tokenizer, stretch)
                    first = text.find(chars[0], lo, start)
                    first = first if first >= 0 else lo + len(stretch) - len(stretch.lstrip())
                return first, chars
            checked = start
        covered = max(covered, end)
    return None


def shown_text(text, limit=16):
    """A stretch of text for a message: JSON-quoted (control characters escaped), cut to `limit`."""
    return json.dumps(text[:limit], ensure_ascii=False) + ("..." if len(text) > limit else "")


def encode(tokenizer, texts, eos_id, locates=None):
    """The records of a batch of documents: their tokens, the eos after each when eos_id >= 0.
    Each encode_batch call gets at most about BATCH_BYTES of text (a long document's pieces in turn).
    locates[d](i) names character i of document d for a message: (FILE:LINE, its place in the line)."""
    documents = [array.array("I") for _ in texts]
    locates = locates or [in_field("text %d" % (number + 1)) for number in range(len(texts))]
    call, size = [], 0

    def failed(e, number, offset):
        # The first line from `offset` on that fails alone, when one does, names the place better than
        # the start of the piece or seam it failed in (the whole file, for a text file).
        text, at = texts[number], offset
        while at < len(text):
            lines = text[at:at + (1 << 20)].splitlines(keepends=True)[:1024]
            try:
                encode_batch(tokenizer, lines)
            except TokenizerFailed:
                for line in lines:
                    try:
                        encode_batch(tokenizer, [line])
                    except TokenizerFailed:
                        offset = at
                        break
                    at += len(line)
                break
            at += sum(map(len, lines))
        where, _ = locates[number](offset)
        return BadInput("%s: the tokenizers library cannot encode this text with the tokenizer %s: %s (a tokenizer "
                        "that fails to encode is bad input: fix it, or use another)" % (where, TOKENIZER_PATH, e))

    def run(call):
        try:
            encodings = encode_batch(tokenizer, [piece for _, _, piece in call])
        except TokenizerFailed as e:  # each piece alone, to name the text it failed on
            for number, offset, piece in call:
                try:
                    encode_batch(tokenizer, [piece])
                except TokenizerFailed as alone:
                    raise failed(alone, number, offset)
            raise failed(e, call[0][0], call[0][1])
        for (number, offset, piece), encoding in zip(call, encodings):
            dropped = first_dropped(tokenizer, piece, encoding) if CHECK_DROPPED else None
            if dropped is not None:
                index, chars = dropped
                where, place = locates[number](offset + index)
                raise BadInput("%s: the tokenizer %s drops %s (U+%04X, %s): it has no token for %s, no unk token "
                               "and no byte fallback, and prepare loses no text unsaid; use a tokenizer with byte "
                               "fallback or an unk token, or take such characters out of the text"
                               % (where, TOKENIZER_PATH, shown_text(chars), ord(chars[0]), place,
                                  "them" if len(chars) > 1 else "it"))
            documents[number].extend(encoding.ids)

    for number, text in enumerate(texts):
        offset = 0
        try:
            for piece in pieces(tokenizer, text):
                if call and size + len(piece) > BATCH_BYTES:
                    run(call)
                    call, size = [], 0
                call.append((number, offset, piece))
                size += len(piece)
                offset += len(piece)
        except TokenizerFailed as e:  # in a seam check
            raise failed(e, number, offset)
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
    tokenizer_path, append_eos, match_special = None, False, False
    i = 0
    while i < len(argv):
        if argv[i] == "--tokenizer" and i + 1 < len(argv):
            tokenizer_path = argv[i + 1]
            i += 2
        elif argv[i] == "--append-eos":
            append_eos = True
            i += 1
        elif argv[i] == "--match-special-tokens":
            match_special = True
            i += 1
        else:
            sys.stderr.write("prepare_text.py: unknown argument %r\n" % argv[i])
            return 1
    assert array.array("I").itemsize == 4, "array('I') is not 32-bit here"
    global PIECE_CHARS, TOKENIZER_PATH, CHECK_DROPPED
    if not re.fullmatch(r"[0-9]+", PIECE_CHARS) or int(PIECE_CHARS) < 1:  # a setting of the user's: bad input
        record(b"E", text_payload("ODYSSEY_PREPARE_PIECE_CHARS=%s: must be a whole number of characters above 0 "
                                  "(the longest text one tokenizer call is given; unset, %d)" % (PIECE_CHARS, 1 << 20)))
        out.flush()
        return 2
    PIECE_CHARS = int(PIECE_CHARS)
    TOKENIZER_PATH = tokenizer_path
    parts = sys.stdin.buffer.read().split(b"\0")
    inputs = [(parts[k].decode(), os.fsdecode(parts[k + 1])) for k in range(0, len(parts) - 1, 2)]
    documents = 0
    try:
        tokenizer = load_tokenizer(tokenizer_path, match_special)
        CHECK_DROPPED = may_drop_text(tokenizer)
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
            texts, locates, size = [], [], 0
            for text, done, locate in READERS[kind](path, number):
                texts.append(text)
                locates.append(locate)
                size += len(text)
                if len(texts) >= BATCH_DOCUMENTS or size >= BATCH_BYTES:
                    out.write(encode(tokenizer, texts, appended, locates))
                    record(b"P", struct.pack("<IQ", number, done))
                    out.flush()  # the progress bar moves now, not when a buffer fills
                    documents += len(texts)
                    texts, locates, size = [], [], 0
            if texts:
                out.write(encode(tokenizer, texts, appended, locates))
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
