#!/usr/bin/env python3
"""The names of the test cases a Catch2 v2 console log reports as failed, so a GPU record says which
failed and not only how many (scripts/gpu/validate.sh writes them into smoke/tests.jsonl).

    python3 scripts/gpu/catch_failures.py LOG        # one name a line
    python3 scripts/gpu/catch_failures.py --self-test

A failure is reported under a block of a rule of dashes, the test case's name (wrapped at 79
columns with no indent), its sections (indented), a rule of dashes, then the source location. The
name is the unindented lines of that block, joined with a space.
"""
import sys

RULE = "-" * 79


def failed_cases(text):
    """The failed test cases' names in a Catch2 v2 console log, in order, each once."""
    lines = text.splitlines()
    names = []
    i = 0
    while i < len(lines):
        if lines[i] == RULE:
            end = next((j for j in range(i + 1, min(len(lines), i + 40)) if lines[j] == RULE), None)
            if end is not None and end > i + 1:
                block = lines[i + 1:end]
                name = " ".join(l.strip() for l in block if l and not l.startswith(" "))
                if name and name not in names:
                    names.append(name)
                i = end + 1
                continue
        i += 1
    return names


def self_test():
    log = "\n".join([
        "Filters: [.cuda]",
        "0.777 s: cuda: every technique together equals the plain run (fp32)",
        "~" * 79,
        "engine_tests is a Catch v2.13.10 host application.",
        "Run with -? for options",
        "",
        RULE,
        "documents: the CUDA kernels per document equal each document's own call and",
        "wraps at the width",
        "  a section",
        RULE,
        "../tests/model/document_mask_test.cpp:147",
        "." * 79,
        "",
        "../tests/model/document_mask_test.cpp:136: FAILED:",
        RULE,
        "documents: the CUDA kernels per document equal each document's own call and",
        "wraps at the width",
        RULE,
        "../tests/model/document_mask_test.cpp:147",
        RULE,
        "another case",
        RULE,
        "x.cpp:1",
        "=" * 79,
        "test cases:  11 |  9 passed |  2 failed",
    ])
    got = failed_cases(log)
    assert got == ["documents: the CUDA kernels per document equal each document's own call and wraps at the width",
                   "another case"], got
    assert failed_cases("All tests passed (3 assertions in 1 test case)\n") == []
    print("catch_failures self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 2:
        print("\n".join(failed_cases(open(sys.argv[1], errors="replace").read())))
    else:
        print(__doc__)
        sys.exit(2)
