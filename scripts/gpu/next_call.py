#!/usr/bin/env python3
"""The next GPU call as docs/gpu.md "The next call" writes it, checked on the build machine: its
predict command's points planned (validate.sh --predict, the build's binaries for the carried ones),
then the host command's points planned under the host command's own environment, and every one of
them found among the first (record.py covered), so that the call the docs give is refused by no
pre-flight check and measures nothing unpredicted.

    python3 scripts/gpu/next_call.py --bin build/bin          # exit 0, or 1 naming what disagrees
    python3 scripts/gpu/next_call.py --self-test              # the parsing, on a section of its own

defines: section, code_blocks, commands, parse_call, find_calls, environment, plan, check
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_MD = os.path.join(ROOT, "docs", "gpu.md")
HEADING = "## The next call"
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")
STAGES = ("smoke", "kernels", "throughput", "planner", "longest", "at_longest", "documents", "offload", "ablation",
          "optimizer", "profile", "collectives")
RECORD = "2000-01-01-h200-0000000"  # a name of the right shape: the check's own records


def section(text, heading=HEADING):
    """The text under the line `heading` up to the next heading of its level or above (a `#` line
    inside a fenced code block is a shell comment, no heading)."""
    lines = text.split("\n")
    start = lines.index(heading)  # ValueError without that exact line
    level, fenced = heading.count("#"), False
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,%d} " % level, lines[i]):
            return "\n".join(lines[start + 1:i])
    return "\n".join(lines[start + 1:])


def code_blocks(text):
    """The fenced code blocks of `text`, in order."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)


def commands(block):
    """Each command of a block as its words: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if shlex.split(line, comments=True)]


def parse_call(words, script):
    """(environment, stages) of one command running `script`: the assignments before it and those
    of an `export` line given as `words` too, the stage names after it."""
    env, i = {}, 0
    if words and words[0] == "export":
        words = words[1:]
    while i < len(words) and ASSIGNMENT.match(words[i]):
        key, _, value = words[i].partition("=")
        env[key] = value
        i += 1
    if i == len(words):
        return env, None
    if not words[i].endswith(script):
        return env, None
    return env, [w for w in words[i + 1:] if w in STAGES]


def find_calls(text):
    """(predict environment, predict stages, host environment, host stages) of the section's first
    validate.sh --predict command (with the export lines before it) and first deadline.sh command."""
    predict_env, predict, host_env, host = {}, None, {}, None
    for block in code_blocks(section(text)):
        exported = {}
        for words in commands(block):
            env, stages = parse_call(words, "validate.sh")
            if words and words[0] == "export":
                exported.update(env)
            elif stages is not None and "--predict" in words and predict is None:
                predict_env, predict = dict(exported, **env), stages
            env, stages = parse_call(words, "deadline.sh")
            if stages is not None and host is None:
                host_env, host = env, stages
    return predict_env, predict, host_env, host


def environment(env):
    """This process's environment with `env`'s variables (RECORD aside: the check names its own)."""
    full_env = {k: v for k, v in os.environ.items() if k not in env and k != "RECORD"}
    full_env.update({k: v for k, v in env.items() if k != "RECORD"})
    return full_env


def plan(env, stages, bin_dir, records, record):
    """validate.sh --predict of `stages` under `env` (the build's binaries) into records/record."""
    cmd = [os.path.join(ROOT, "scripts", "gpu", "validate.sh"), "--predict", "--device", "h200", "--bin", bin_dir,
           "--records", records, "--record", record] + stages
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(env), capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def check(text, bin_dir):
    """Problems (strings) of the section's call: none when the host command's points are all
    among the predict command's."""
    predict_env, predict, host_env, host = find_calls(text)
    if predict is None or host is None:
        return ["docs/gpu.md \"The next call\": no %s command found" % ("validate.sh --predict" if predict is None
                                                                       else "deadline.sh")]
    problems = [] if set(host) <= set(predict) else [
        "the host runs stages %s that the predictions leave out" % sorted(set(host) - set(predict))]
    # One environment for both: what the points do not show (the steps of a point, the baselines
    # beside Odyssey) the call must still run as predicted
    call_env = {k: v for k, v in host_env.items() if k != "RECORD"}
    if call_env != predict_env:
        problems.append("the host command's environment %s is not the predict command's %s" % (call_env, predict_env))
    with tempfile.TemporaryDirectory() as tmp:
        rc, out = plan(predict_env, predict, bin_dir, os.path.join(tmp, "committed"), RECORD)
        if rc != 0:
            return problems + ["the predict command failed (rc %d): %s" % (rc, out[-400:])]
        rc, out = plan(host_env, host, bin_dir, os.path.join(tmp, "now"), RECORD)
        if rc != 0:
            return problems + ["the host command's points could not be planned (rc %d): %s" % (rc, out[-400:])]
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", "record.py"), "covered",
                               "--predicted", os.path.join(tmp, "now", RECORD, "predictions"),
                               "--records", os.path.join(tmp, "committed"), "--record", RECORD],
                              env=environment(host_env), capture_output=True, text=True)
        print(proc.stdout.strip())
        if proc.returncode != 0:
            problems.append("the host command measures points the predict command does not plan: " + proc.stdout)
    return problems


def self_test():
    doc = """# x
## The next call

text

```
make build
RECORD=$(python3 scripts/gpu/record.py name --bin gpu-carry/bin --device h200)   # a comment
export A=1 B="two words" \\
  C=3
scripts/gpu/validate.sh --predict --device h200 --carried gpu-carry --record "$RECORD" smoke throughput
```

```
RECORD=N A=1 B="two words" \\
  scripts/gpu/deadline.sh 555 throughput
```

## Next

```
scripts/gpu/deadline.sh 555 planner
```
"""
    predict_env, predict, host_env, host = find_calls(doc)
    assert predict_env == {"A": "1", "B": "two words", "C": "3"}, predict_env
    assert predict == ["smoke", "throughput"], predict
    assert host_env == {"RECORD": "N", "A": "1", "B": "two words"} and host == ["throughput"], (host_env, host)
    assert "## Next" not in section(doc) and len(code_blocks(section(doc))) == 2
    commented = doc.replace("make build\n", "# a comment line first\nmake build\n")
    assert len(code_blocks(section(commented))) == 2, section(commented)  # a shell comment is no heading
    assert check(doc.replace('RECORD=N A=1 B="two words"', 'RECORD=N A=1'), "bin")[0].startswith(
        "the host command's environment"), "a variable left out of the host command passed"
    assert check(doc.replace("validate.sh --predict", "validate.sh"), "bin")[0].endswith("no validate.sh --predict "
                                                                                      "command found")
    print("next_call self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    with open(GPU_MD) as f:
        problems = check(f.read(), os.path.abspath(args.bin))
    for p in problems:
        print("next_call: %s" % p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
