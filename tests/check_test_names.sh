#!/usr/bin/env bash
# Every Catch2 test name must survive CTest's discovery: a ';' splits a name into two CTest
# entries that match no test, run nothing and pass, so the real test never runs in `make test`.
# usage: tests/check_test_names.sh EXECUTABLE...   (exit 1 naming each offending test)
set -u
bad=0
for exe in "$@"; do
  while IFS= read -r name; do
    case "$name" in
      *";"*) echo "$(basename "$exe"): test name with ';' (CTest would split it and run nothing): $name"; bad=1 ;;
    esac
  done < <("$exe" --list-test-names-only 2>/dev/null)
done
[ "$bad" = 0 ] && echo "every test name of $# executables is safe for CTest"
exit "$bad"
