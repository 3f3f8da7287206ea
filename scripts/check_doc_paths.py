#!/usr/bin/env python3
"""Every repository path written in backticks in README.md and docs/ exists, so the docs cannot
point at a file that moved. Usage: scripts/check_doc_paths.py [--self-test]; exit 1 naming each
stale path with its file and line.

A token counts as a path when it starts with a top-level folder (engine/, app/, tests/, docs/,
bench/, scripts/, presets/, kernels/, assets/, cmake/) or with one of engine/'s folders (then read
under engine/: `memory/offload.*`). It exists when the path does, when a glob in it matches, or
when it names a module without its extension (`engine/ops/layers`: layers.h, layers.cpp)."""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TOP = ("engine", "app", "tests", "docs", "bench", "scripts", "presets", "kernels", "assets", "cmake")
PATH_CHARS = r"[A-Za-z0-9_./*+-]*"


def engine_folders(root):
    return tuple(sorted(d for d in os.listdir(os.path.join(root, "engine")) if os.path.isdir(os.path.join(root, "engine", d))))


def candidate(token, folders):
    """The repository path a backticked token names, or None when it names none."""
    token = token.strip().split()[0].rstrip(".,;:") if token.strip() else ""
    if re.fullmatch(r"(%s)/%s" % ("|".join(TOP), PATH_CHARS), token):
        return token.split(":")[0]
    if folders and re.fullmatch(r"(%s)/%s" % ("|".join(folders), PATH_CHARS), token) and "/" in token:
        return "engine/" + token.split(":")[0]
    return None


def exists(root, path):
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    return os.path.exists(full) or bool(glob.glob(full + ".*"))


def stale_paths(root):
    """[(file, line, path)] of every backticked path that does not exist."""
    folders = engine_folders(root)
    files = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"),
                                                                                recursive=True))
    stale = []
    for name in files:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for match in re.finditer(r"`([^`\n]+)`", line):
                    path = candidate(match.group(1), folders)
                    if path and not exists(root, path):
                        stale.append((name, number, path))
    return stale


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for path in ("engine/ops/layers.cpp", "engine/memory/offload.h", "docs/x.md", "README.md"):
            os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
            open(os.path.join(root, path), "w").close()
        with open(os.path.join(root, "docs", "x.md"), "w") as f:
            f.write("see `engine/ops/layers`, `memory/offload.*` and `engine/ops/layers.cpp:12`,\n"
                    "not `memory/tiling`; `odyssey train` and `<record>/planner/x.json` are no paths\n")
        found = stale_paths(root)
        assert found == [("docs/x.md", 2, "engine/memory/tiling")], found
    print("check_doc_paths.py self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    stale = stale_paths(ROOT)
    for name, number, path in stale:
        print("%s:%d: `%s` does not exist" % (name, number, path))
    if stale:
        sys.exit(1)
    print("check_doc_paths.py: every path in backticks exists")


if __name__ == "__main__":
    main()
