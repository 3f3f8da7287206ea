#!/usr/bin/env bash
# Fuzzes the preset loader (what `odyssey check` runs) and the safetensors header reader (what
# loading a Hugging Face checkpoint runs) with libFuzzer + ASan/UBSan from Debian's clang.
# Usage: scripts/fuzz.sh [SECONDS=180 per target] [TARGETS="preset safetensors"]. Seeds: presets/
# and tests/fixtures/ (preset), files written by write_safetensors' layout (safetensors).
# toml++'s internal TOML_ASSERTs are compiled out exactly as in the shipped GCC release build (where
# its TOML_ASSUME is a no-op and the parser reports the error); ASan/UBSan stay on for our code.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-180}"
TARGETS="${2:-preset safetensors}"
OUT="${FUZZ_DIR:-build-fuzz}"
CXX="${FUZZ_CXX:-clang++}"
mkdir -p "$OUT"
if [[ " $TARGETS " == *" preset "* ]]; then
  mkdir -p "$OUT/corpus"
  TOMLPP_INCLUDE="${ODYSSEY_TOMLPP_INCLUDE:-/usr/include}"
  "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -DTOML_HEADER_ONLY=1 '-DTOML_ASSERT(expr)=static_assert(true)' -I. -I"$TOMLPP_INCLUDE" \
    tests/fuzz/preset_fuzz.cpp engine/config/run_config.cpp engine/config/sizes.cpp \
    engine/config/schema.cpp engine/config/preset.cpp engine/config/validate.cpp engine/util/json.cpp \
    -o "$OUT/preset_fuzz"
  cp presets/*.toml tests/fixtures/*.toml "$OUT/corpus/" 2>/dev/null || true
  # A dictionary of every table and key name steers the fuzzer into the schema.
  {
    for t in model training parallel memory hardware output; do echo "\"[$t]\""; done
    grep -ohE '"(flavor|profile|[a-z_]+)", KeyKind|ODY_[A-Z]+\("[a-z]*", [a-z_.]+, "[a-z_]+"' engine/config/schema.cpp \
      | grep -oE '"[a-z_]+"' | grep -vE '^"(model|training|parallel|memory|hardware|output)"$' | sort -u
    echo '"3M"'; echo '"512K"'; echo '"custom"'; echo '"llama3-8b"'; echo '"true"'; echo '"false"'
  } > "$OUT/preset.dict"
  echo "fuzz: running $OUT/preset_fuzz for ${SECONDS_TO_RUN}s"
  "$OUT/preset_fuzz" "$OUT/corpus" -dict="$OUT/preset.dict" -max_total_time="$SECONDS_TO_RUN" \
    -max_len=4096 -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 25
fi
if [[ " $TARGETS " == *" safetensors "* ]]; then
  "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
    tests/fuzz/safetensors_fuzz.cpp engine/util/safetensors.cpp engine/util/files.cpp engine/util/json.cpp \
    -o "$OUT/safetensors_fuzz"
  mkdir -p "$OUT/safetensors-corpus"
  # Seeds: a file of mixed dtypes with metadata, and an empty one (8-byte length, header, data).
  python3 - "$OUT/safetensors-corpus" <<'PY'
import json, struct, sys
def write(name, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<Q", len(text)) + text + data)
write("mixed", {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                "h": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
                "e": {"dtype": "F16", "shape": [0], "data_offsets": [32, 32]}}, bytes(32))
write("empty", {}, b"")
PY
  printf '%s\n' '"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"F32"' '"BF16"' '"F16"' '"F4"' '"U8"' \
    '"I64"' '"C64"' '"F8_E4M3"' '"[0,0]"' '"{}"' '"18446744073709551615"' > "$OUT/safetensors.dict"
  echo "fuzz: running $OUT/safetensors_fuzz for ${SECONDS_TO_RUN}s"
  "$OUT/safetensors_fuzz" "$OUT/safetensors-corpus" -dict="$OUT/safetensors.dict" -max_total_time="$SECONDS_TO_RUN" \
    -max_len=4096 -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 25
fi
