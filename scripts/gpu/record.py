#!/usr/bin/env python3
"""A GPU call's record: the raw JSON its stages wrote, under a manifest.json (date, device, commit,
command, stages run), laid out as it is committed under bench/results/<record>/; and its name.

    python3 scripts/gpu/record.py name --bin gpu-carry/bin [--device h200]   # DATE-DEVICE-COMMIT
    python3 scripts/gpu/record.py stage --work W --into R --name S --status ran --bin DIR FILE...
    python3 scripts/gpu/record.py predictions --into R --device h200 --bin DIR [--not-predicted S=WHY]...
    python3 scripts/gpu/record.py covered --predicted P --records bench/results --record NAME

A record folder: manifest.json, then each stage's raw JSON at the path it has in the call's work
folder (throughput/throughput.jsonl, ...), and predictions/ (committed before the call:
predictions/manifest.json and predictions/<stage>/<point>.json, each `odyssey plan --json` of one
point the stage measures). validate.sh adds each stage as it ends (`stage`), so a call cut short
keeps what it measured; the manifest's call_id keeps two calls from sharing one folder. The
manifest's call_started_utc is when the call began (ODYSSEY_CALL_STARTED_UTC, which deadline.sh and
validate.sh set before the first stage; else the stamp in the call id), so that
scripts/results_tables.py can hold the predictions' made_utc and their first commit to before it.

defines: RECORD_NAME, MANIFEST, PREDICTIONS, recorded_environment, device_name, device_slug, binaries_commit, record_name, read_json,
read_jsonl, parse_utc, call_id_start, call_started_utc, add_stage, write_predictions_manifest, group_prediction_dirs,
prediction_files, uncommitted, check_covered
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = "manifest.json"
PREDICTIONS = "predictions"
# DATE-DEVICE-COMMIT, with -N for a further call of the same day, GPU and commit.
RECORD_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9]+)-([0-9a-f]{7})(?:-(\d+))?$")
# The environment that changes what a call measures, kept in its manifest when set.
RECORDED_ENVIRONMENT = ("THROUGHPUT_LENGTHS", "THROUGHPUT_SYSTEMS", "PLANNER_CASES", "PLANNER_LENGTHS",
                        "PLANNER_STEPS", "LONGEST_BOX",
                        "LONGEST_SYSTEMS", "LONGEST_OF", "AT_LONGEST_FROM", "AT_LONGEST_LENGTHS",
                        "AT_LONGEST_SYSTEMS", "AT_LONGEST_STEPS", "PROFILE_LENGTH", "PROFILE_SYSTEMS",
                        "PROFILE_TIMEOUT", "ODYSSEY_BENCH_SETS")
def recorded_environment():
    """The variables of RECORDED_ENVIRONMENT this process has set: {name: value}."""
    return {k: os.environ[k] for k in RECORDED_ENVIRONMENT if os.environ.get(k)}


# A raw file larger than this stays in the call's archive only (the manifest names it).
MAX_FILE_BYTES = 4 << 20


def device_name(given=None):
    """The GPU's name as nvidia-smi gives it ("NVIDIA H200"), `given` where one is named (a
    prediction made on a machine without the GPU), "cpu" without either."""
    if given:
        return given
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        first = out.stdout.strip().splitlines()[:1] if out.returncode == 0 else []
        return first[0].strip() if first and first[0].strip() else "cpu"
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"


def device_slug(name):
    """The device part of a record's name: the model of "NVIDIA H100 80GB HBM3" (h100), "cpu"."""
    words = re.findall(r"[A-Za-z]+[0-9]+[A-Za-z0-9]*", name.replace("NVIDIA", ""))
    if words:
        return words[0].lower()
    return re.sub(r"[^a-z0-9]+", "", name.lower())[:16] or "unknown"


def binaries_commit(bin_dir):
    """(full hash, uncommitted changes) of the binaries in bin_dir: the manifest.txt that
    scripts/gpu/pack.sh writes beside a carried bin/, else the checkout's HEAD."""
    manifest = os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "manifest.txt")
    if os.path.exists(manifest):
        with open(manifest) as f:
            for line in f:
                if line.startswith("commit "):
                    return line.split()[1], "uncommitted" in line
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"], capture_output=True).returncode != 0
    return (head.stdout.strip() or "0" * 40), dirty


def record_name(date, device, commit):
    """DATE-DEVICE-COMMIT: 2026-11-27-h200-5407020."""
    return "%s-%s-%s" % (date, device_slug(device), commit[:7])


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# UTC as the manifests write it (2026-11-28T14:00:19Z), and the stamp of a call id
# ("deadline-20261128T140019Z-2989": the moment deadline.sh or validate.sh began).
UTC_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
CALL_ID_STAMP = re.compile(r"-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-")


def parse_utc(text):
    """An aware datetime of an ISO 8601 time ("...Z", or git's "...+01:00"), None when text is none."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def call_id_start(call_id):
    """The start a call id carries, as "2026-11-28T14:00:19Z", or None."""
    stamp = CALL_ID_STAMP.search(call_id or "")
    return "%s-%s-%sT%s:%s:%sZ" % stamp.groups() if stamp else None


def call_started_utc(environ=None):
    """When this call began: ODYSSEY_CALL_STARTED_UTC where set and well formed, else the stamp of
    ODYSSEY_CALL_ID, else None (then the manifest says nothing of it)."""
    environ = os.environ if environ is None else environ
    given = environ.get("ODYSSEY_CALL_STARTED_UTC", "")
    if UTC_TEXT.match(given):
        return given
    if given:
        print("record: ODYSSEY_CALL_STARTED_UTC=%r is not YYYY-MM-DDTHH:MM:SSZ: the call id's stamp stands in"
              % given, file=sys.stderr)
    return call_id_start(environ.get("ODYSSEY_CALL_ID", ""))


def read_json(path):
    """A raw JSON file of a record, or None when it is missing or unreadable (a stage cut short)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_jsonl(path):
    """The JSON objects of a JSONL file, one a line; lines that are not whole objects are skipped."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def start_record(into, args):
    """The manifest of the call adding to `into`: the one there when it is this call's, else a new
    one (a scratch folder left by an earlier call is emptied, its predictions kept)."""
    path = os.path.join(into, MANIFEST)
    manifest = read_json(path)
    call_id = os.environ.get("ODYSSEY_CALL_ID", "")
    if manifest is not None and manifest.get("call_id") == call_id:
        return manifest
    if manifest is not None:
        if os.path.abspath(into).startswith(os.path.join(ROOT, "bench", "results") + os.sep):
            sys.exit("record: %s holds another call's record: a call writes under $OUT, and "
                     "scripts/results_tables.py --add brings it here" % into)
        for entry in os.listdir(into):
            if entry != PREDICTIONS:
                target = os.path.join(into, entry)
                shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
    name = device_name()
    commit, dirty = binaries_commit(args.bin)
    started = call_started_utc()
    # started_utc: the call's start where known, else (a caller that sets neither) this first stage's end
    start = {"started_utc": started, "call_started_utc": started} if started else {"started_utc": now()}
    return {"record": os.path.basename(os.path.abspath(into)), "date": today(), **start,
            "device": name, "device_slug": device_slug(name), "commit": commit[:7], "commit_full": commit,
            "uncommitted_changes": dirty, "binaries": os.path.relpath(os.path.abspath(args.bin), ROOT),
            "dry_run": bool(args.dry_run), "command": os.environ.get("ODYSSEY_RECORD_COMMAND", ""),
            "environment": recorded_environment(),
            "call_id": call_id, "stages": [], "files_left_out": []}


def add_stage(args):
    """Copies one stage's raw files from the work folder into the record and lists the stage in its
    manifest (with --if-absent, only when the manifest does not list it yet)."""
    os.makedirs(args.into, exist_ok=True)
    manifest = start_record(args.into, args)
    if args.if_absent and any(s["name"] == args.name for s in manifest["stages"]):
        return 0
    copied = []
    for rel in args.files:
        source = os.path.join(args.work, rel)
        if not os.path.isfile(source):
            continue
        size = os.path.getsize(source)
        if size > MAX_FILE_BYTES:
            manifest["files_left_out"].append("%s (%d bytes, over %d: in the call's archive)" % (rel, size, MAX_FILE_BYTES))
            continue
        os.makedirs(os.path.dirname(os.path.join(args.into, rel)), exist_ok=True)
        shutil.copyfile(source, os.path.join(args.into, rel))
        copied.append(rel)
    manifest["stages"] = [s for s in manifest["stages"] if s["name"] != args.name]
    manifest["stages"].append({"name": args.name, "status": args.status, "rc": args.rc, "seconds": args.seconds,
                               "files": copied})
    manifest["finished_utc"] = now()
    write_json(os.path.join(args.into, MANIFEST), manifest)
    return 0


def write_predictions_manifest(args):
    """predictions/manifest.json over the prediction files the stages wrote (predictions/<stage>/*.json):
    for which GPU and binaries they were made, by what command under which environment (the call's
    must give the same points: check_covered), and the stages with no prediction and why."""
    root = os.path.join(args.into, PREDICTIONS)
    os.makedirs(root, exist_ok=True)
    stages = {}
    for path in sorted(glob.glob(os.path.join(root, "*", "*.json"))):
        stage = os.path.basename(os.path.dirname(path))
        stages.setdefault(stage, []).append(os.path.relpath(path, root))
    commit, dirty = binaries_commit(args.bin)
    reasons = dict(item.split("=", 1) for item in args.not_predicted)
    write_json(os.path.join(root, MANIFEST), {
        "date": today(), "made_utc": now(), "device": args.device, "device_slug": device_slug(args.device),
        "commit": commit[:7], "commit_full": commit, "uncommitted_changes": dirty,
        "command": os.environ.get("ODYSSEY_RECORD_COMMAND", ""),
        "environment": recorded_environment(),
        "stages": stages, "not_predicted": reasons})
    print("predictions: %s (%s)" % (root, ", ".join("%s %d" % (s, len(f)) for s, f in stages.items()) or "none"))
    return 0


def group_prediction_dirs(records, name):
    """The predictions/ folders a call named `name` may measure against: its record's, and those of
    the earlier calls of its group (the same date, device and commit, a lower -N) that ran (a
    manifest.json beside them), as scripts/results_tables.py adopts them."""
    named = RECORD_NAME.match(name)
    if not named:
        return [os.path.join(records, name, PREDICTIONS)]
    number = int(named.group(4) or 1)
    out = []
    for folder in sorted(os.listdir(records)) if os.path.isdir(records) else []:
        other = RECORD_NAME.match(folder)
        if not other or other.group(1, 2, 3) != named.group(1, 2, 3) or int(other.group(4) or 1) > number:
            continue
        if folder == name or os.path.exists(os.path.join(records, folder, MANIFEST)):
            out.append(os.path.join(records, folder, PREDICTIONS))
    return out


def prediction_files(root):
    """{(stage, file name): path} of the prediction files under a predictions/ folder."""
    return {(os.path.basename(os.path.dirname(p)), os.path.basename(p)): p
            for p in glob.glob(os.path.join(root, "*", "*.json"))}


def uncommitted(paths, folder):
    """The paths among `paths` (files under `folder`) that git does not hold as committed: untracked,
    or changed since HEAD. Empty where `folder` is in no git checkout (a copy of the tree without
    its history: nothing to ask)."""
    def git(*args):
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True)

    if not paths or git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        return []
    rel = [os.path.relpath(p, folder) for p in paths]
    tracked = set(git("ls-files", "-z", "--", *rel).stdout.split("\0"))  # -z: names unquoted
    changed = set(git("diff", "-z", "--name-only", "--relative", "HEAD", "--", *rel).stdout.split("\0"))
    return [p for p, r in zip(paths, rel) if r not in tracked or r in changed]


def check_covered(args):
    """Whether every point a call is about to measure has a prediction committed before it: the
    points planned now under the call's environment (`validate.sh --predict` into args.predicted)
    against those of its record's group under args.records (group_prediction_dirs), by file name
    (point_file_name: the preset, the length and a digest of the point's settings), each committed
    where the records are in a git checkout. Prints the points without one; status 1 when any."""
    wanted = prediction_files(args.predicted)
    have = {}
    for folder in group_prediction_dirs(args.records, args.record):
        have.update(prediction_files(folder))
    missing = sorted(set(wanted) - set(have))
    matched = [have[k] for k in sorted(set(wanted) & set(have))]
    loose = uncommitted(matched, args.records)
    if missing or loose:
        print("the call would measure %d point(s) with no committed prediction under %s for %s or an earlier call "
              "of its group that ran:" % (len(missing) + len(loose), args.records, args.record))
        for stage, name in missing:
            print("  %s/%s" % (stage, name))
        for path in loose:
            print("  %s (predicted, not committed)" % os.path.relpath(path, args.records))
        return 1
    print("predictions: all %d point(s) of the call predicted and committed before it" % len(wanted))
    # What the points do not show (the steps of a point, the baselines beside Odyssey): said, not refused,
    # since a later call of the group may measure a part of what was predicted
    for folder in group_prediction_dirs(args.records, args.record)[:1]:
        made = (read_json(os.path.join(folder, MANIFEST)) or {}).get("environment")
        now = recorded_environment()
        for key in sorted(set(made or {}) | set(now)) if made is not None else []:
            if (made or {}).get(key) != now.get(key):
                print("  note: %s is %r here, %r where the predictions were made" % (key, now.get(key), made.get(key)))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    name = sub.add_parser("name", help="the record name of a call: DATE-DEVICE-COMMIT")
    name.add_argument("--bin", required=True)
    name.add_argument("--device", help="the GPU, where nvidia-smi cannot say (before a call)")
    stage = sub.add_parser("stage", help="add one stage's raw files to a record")
    stage.add_argument("--work", required=True)
    stage.add_argument("--into", required=True)
    stage.add_argument("--name", required=True)
    stage.add_argument("--status", required=True)
    stage.add_argument("--rc", type=int, default=None)
    stage.add_argument("--seconds", type=int, default=None)
    stage.add_argument("--bin", required=True)
    stage.add_argument("--dry-run", action="store_true")
    stage.add_argument("--if-absent", action="store_true")
    stage.add_argument("files", nargs="*")
    predictions = sub.add_parser("predictions", help="write predictions/manifest.json")
    predictions.add_argument("--into", required=True)
    predictions.add_argument("--device", required=True)
    predictions.add_argument("--bin", required=True)
    predictions.add_argument("--not-predicted", action="append", default=[], metavar="STAGE=WHY")
    covered = sub.add_parser("covered", help="whether the points a call will measure have predictions")
    covered.add_argument("--predicted", required=True, help="a predictions/ folder of the call's points, planned now")
    covered.add_argument("--records", required=True, help="the records holding the committed predictions")
    covered.add_argument("--record", required=True, help="the call's record name")
    args = parser.parse_args()
    if args.command == "covered":
        return check_covered(args)
    if args.command == "name":
        print(record_name(today(), device_name(args.device), binaries_commit(args.bin)[0]))
        return 0
    if args.command == "stage":
        return add_stage(args)
    return write_predictions_manifest(args)


if __name__ == "__main__":
    sys.exit(main())
