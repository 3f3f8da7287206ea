#!/usr/bin/env bash
# The repository's tree, checked on the sources: no two source, header or test files of its own
# folders share a name, and tests/ mirrors the source tree (tests/<x> holds the tests of
# engine/<x>, app/<x> or kernels/) besides a short list of helper folders.
# Usage: check_tree.sh SOURCE_DIR | check_tree.sh --self-test (each rule on a temporary tree: a
# clean one passes, each violation fails)
set -euo pipefail

# The repository's own folders; the ones below them that are not its own are pruned: build
# directories, Python's caches, and engine/parallel/gloo_shim (declarations of Gloo's headers, whose
# names and paths are Gloo's include paths).
own_folders="app engine kernels tests bench scripts"
pruned=(-name build -o -name 'build-*' -o -name __pycache__ -o -name gloo_shim)
# Source, header and test files (CMakeLists.txt, README.md and data files may repeat).
file_patterns=(-name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.h' -o -name '*.hpp'
               -o -name '*.cu' -o -name '*.cuh' -o -name '*.in' -o -name '*.py' -o -name '*.sh')
# Folders directly under tests/ that mirror no source folder, each with what it holds.
declare -A helper_folders=(
  [common]="helpers several suites share (engine_test_util.h, document_batch.h, free_port.h, child_process.h) and
            cpu_capability_test.cpp, which engine_tests and parallel_tests both run"
  [fixtures]="the TOML input files of the tests, good and bad"
  [fuzz]="the libFuzzer targets (scripts/fuzz.sh)"
  [hf]="the Hugging Face checkpoints' generator and the export check (transformers)"
)

# check_tree ROOT: prints each violation, returns 1 when there is one.
check_tree() {
  local root=$1 bad=0 folder name line
  # (1) one name, one file
  while IFS= read -r line; do
    echo "same name: $line (name each file after what it holds)"
    bad=1
  done < <(cd "$root" && for folder in $own_folders; do
             [ -d "$folder" ] || continue
             find "$folder" \( "${pruned[@]}" \) -prune -o -type f \( "${file_patterns[@]}" \) \
                  -printf '%f\t%p\n'
           done | sort |
           awk -F'\t' '{ paths[$1] = paths[$1] " " $2; count[$1]++ }
                       END { for (n in count) if (count[n] > 1) print n ":" paths[n] }' | sort)
  # (2) tests/<x> mirrors engine/<x> (a folder, or files engine/<x>.*), app/<x> or kernels/, or is
  # a helper folder
  for folder in "$root"/tests/*/; do
    [ -d "$folder" ] || continue
    name=$(basename "$folder")
    # an empty folder is no part of the repository (git holds files), e.g. one left by a move
    [ -n "$(find "$folder" -type f -print -quit)" ] || continue
    if [ -d "$root/engine/$name" ] || compgen -G "$root/engine/$name.*" >/dev/null ||
       [ -d "$root/app/$name" ] || { [ "$name" = kernels ] && [ -d "$root/kernels" ]; } ||
       [ -n "${helper_folders[$name]+set}" ]; then
      continue
    fi
    echo "stray test folder: tests/$name mirrors no engine/$name, app/$name or kernels/ and is no" \
         "helper folder (helpers: $(printf '%s\n' "${!helper_folders[@]}" | sort | xargs);" \
         "tests/check_tree.sh lists them)"
    bad=1
  done
  return "$bad"
}

self_test() {
  local out
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # A clean tree: mirrors of an engine folder, engine files (session.*), an app folder and kernels/,
  # a helper folder, repeated CMakeLists.txt, a build directory and Gloo's headers pruned.
  mkdir -p "$tmp"/{engine/train,engine/parallel/gloo_shim/gloo,app/cli,kernels,bench/build,scripts}
  mkdir -p "$tmp"/tests/{train,session,cli,kernels,common}
  touch "$tmp"/engine/train/trainer.cpp "$tmp"/engine/session.h "$tmp"/app/cli/main.cpp
  touch "$tmp"/kernels/rmsnorm.cu "$tmp"/bench/build/main.cpp
  touch "$tmp"/engine/parallel/gloo_shim/gloo/context.h "$tmp"/engine/parallel/context.h
  touch "$tmp"/tests/train/trainer_test.cpp "$tmp"/tests/session/session_test.cpp
  touch "$tmp"/tests/cli/cli_test.cpp
  touch "$tmp"/tests/kernels/rmsnorm_test.cpp "$tmp"/tests/common/engine_test_util.h
  touch "$tmp"/engine/CMakeLists.txt "$tmp"/tests/CMakeLists.txt
  mkdir -p "$tmp"/tests/engine/memory  # empty: left by a move, not in the repository
  if ! out=$(check_tree "$tmp"); then
    echo "self-test: a clean tree failed: $out"
    return 1
  fi
  # (1) two files of one name in two folders
  touch "$tmp"/tests/train/main.cpp
  local expected="same name: main.cpp: app/cli/main.cpp tests/train/main.cpp (name each file after"
  expected+=" what it holds)"
  if out=$(check_tree "$tmp") || [ "$out" != "$expected" ]; then
    echo "self-test: two main.cpp not reported as the one violation: $out"
    return 1
  fi
  rm "$tmp"/tests/train/main.cpp
  # (2) a test folder that mirrors nothing (the old tests/engine/<x>)
  touch "$tmp"/tests/engine/memory/offload_test.cpp
  if out=$(check_tree "$tmp") || [[ "$out" != "stray test folder: tests/engine mirrors"* ]] ||
     [ "$(wc -l <<<"$out")" != 1 ]; then
    echo "self-test: tests/engine not reported as the one violation: $out"
    return 1
  fi
  echo "tree self-test: a clean tree passes, a repeated name and a stray test folder each fail"
}

if [ "${1:-}" = --self-test ]; then
  self_test
  exit
fi
root=${1:?usage: check_tree.sh SOURCE_DIR | check_tree.sh --self-test}
root=${root%/}
if check_tree "$root"; then
  echo "tree: each source, header and test file has its own name;" \
       "tests/ mirrors engine/, app/ and kernels/"
else
  exit 1
fi
