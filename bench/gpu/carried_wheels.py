"""Python packages the GPU host lacks, carried to it as wheels and put on sys.path by the benchmark
that needs them (hf_baseline.py: transformers, liger-kernel and their dependencies). The host has
PyTorch and its dependencies and no package registry: scripts/gpu/fetch_deps.sh downloads the wheels
pinned with hashes in scripts/gpu/wheels.txt into .deps/wheels on the build machine, scripts/gpu/pack.sh
copies them into gpu-carry/wheels, and here every wheel this interpreter can load is unpacked once
into a temporary folder named after the wheels and put first on sys.path. Imports no torch: a carried
package (typing_extensions) must be loaded before torch loads the host's.

defines: parse_wheel_name, compatible, wheels_folder, use_carried_wheels, self_test
"""
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where the wheels are looked for, first match wins: ODYSSEY_BENCH_WHEELS (validate.sh --carried sets
# it), the carried folder, the build machine's download.
WHEEL_FOLDERS = (os.path.join(ROOT, "gpu-carry", "wheels"), os.path.join(ROOT, ".deps", "wheels"))


def parse_wheel_name(filename):
    """(project, version, python tags, abi tags, platform tags) of a wheel's file name (PEP 427:
    name-version[-build]-python-abi-platform.whl; compressed tag sets split on '.')."""
    parts = os.path.basename(filename)[:-len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise ValueError("not a wheel name: %s" % filename)
    python, abi, plat = parts[-3:]
    return parts[0].lower().replace("_", "-"), parts[1], set(python.split(".")), set(abi.split(".")), set(plat.split("."))


def compatible(filename, version=sys.version_info[:2], machine=platform.machine()):
    """Whether an interpreter of `version` (major, minor) on a glibc Linux `machine` can load the
    wheel: pure Python (py3, any), the stable ABI from its minor version on (cp3X-abi3), or built
    for exactly this version (cp3X-cp3X), on any or a manylinux platform of this machine."""
    _, _, pythons, abis, plats = parse_wheel_name(filename)
    this = "cp%d%d" % version
    python_ok = ("py3" in pythons or "py%d%d" % version in pythons or
                 ("abi3" in abis and any(p.startswith("cp3") and int(p[3:]) <= version[1] for p in pythons)) or
                 (this in pythons and this in abis))
    plat_ok = "any" in plats or any(p.startswith("manylinux") and p.endswith("_" + machine) for p in plats)
    return python_ok and plat_ok and ("none" in abis or "abi3" in abis or this in abis)


def wheels_folder():
    """The first folder holding wheels: ODYSSEY_BENCH_WHEELS, then WHEEL_FOLDERS; None when none."""
    for folder in (os.environ.get("ODYSSEY_BENCH_WHEELS", ""),) + WHEEL_FOLDERS:
        if folder and os.path.isdir(folder) and any(f.endswith(".whl") for f in os.listdir(folder)):
            return folder
    return None


def _unpack(wheels, into):
    """Each wheel unpacked into `into` (a wheel is a zip of its site-packages layout), made whole in a
    sibling folder first and renamed, so a process cut off mid-way leaves nothing half-unpacked."""
    if os.path.isdir(into):
        return
    partial = tempfile.mkdtemp(prefix=os.path.basename(into) + ".partial-", dir=os.path.dirname(into))
    for path in wheels:
        with zipfile.ZipFile(path) as z:
            z.extractall(partial)
    try:
        os.rename(partial, into)
    except OSError:  # another process got there first: its copy is the same
        pass


def use_carried_wheels(modules):
    """Makes `modules` importable: the host's own where each imports already (the result says so and
    the versions), else every carried wheel this interpreter loads, unpacked and put first on sys.path
    (one consistent set: the versions tested together). Returns {"source": "host" | "carried", ...},
    or {"source": "missing", "error": ...} when the host lacks a module and no wheels are there."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return {"source": "host", "missing": []}
    folder = wheels_folder()
    if folder is None:
        return {"source": "missing", "missing": missing,
                "error": "%s not installed and no carried wheels (scripts/gpu/fetch_deps.sh, then pack.sh)" % ", ".join(missing)}
    names = sorted(f for f in os.listdir(folder) if f.endswith(".whl"))
    usable = [f for f in names if compatible(f)]
    projects = [parse_wheel_name(f)[0] for f in usable]
    twice = sorted({p for p in projects if projects.count(p) > 1})
    if twice:
        return {"source": "missing", "missing": missing, "error": "%s: more than one wheel of %s" % (folder, ", ".join(twice))}
    digest = hashlib.sha1("\n".join("%s %d" % (f, os.path.getsize(os.path.join(folder, f))) for f in usable).encode())
    into = os.path.join(tempfile.gettempdir(), "odyssey-wheels-py%d%d-%s" % (sys.version_info[:2] + (digest.hexdigest()[:12],)))
    _unpack([os.path.join(folder, f) for f in usable], into)
    sys.path.insert(0, into)
    importlib.invalidate_caches()
    still = [m for m in modules if importlib.util.find_spec(m) is None]
    out = {"source": "carried", "missing": missing, "folder": folder, "unpacked": into, "wheels": usable,
           "not_loadable_here": [f for f in names if f not in usable]}
    if still:
        out["error"] = "%s still missing with the carried wheels of %s" % (", ".join(still), folder)
    return out


def version_of(distribution):
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def self_test():
    """The wheel-name rules on the names fetch_deps.sh downloads, for the host's CPython 3.12 on x86_64."""
    host = dict(version=(3, 12), machine="x86_64")
    assert parse_wheel_name("huggingface_hub-2.4.0-py3-none-any.whl")[:2] == ("huggingface-hub", "2.4.0")
    assert compatible("transformers-5.23.0-py3-none-any.whl", **host)
    assert compatible("numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", **host)
    assert not compatible("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", **host)
    assert not compatible("numpy-2.4.6-cp312-cp312-manylinux_2_27_aarch64.whl", **host)
    assert not compatible("numpy-2.4.6-cp312-cp312-musllinux_1_2_x86_64.whl", **host)
    assert compatible("safetensors-0.8.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", **host)
    assert not compatible("safetensors-0.8.0-cp313-abi3-manylinux_2_17_x86_64.whl", **host)  # needs 3.13
    assert not compatible("regex-2026.11.19-cp312-cp312-win_amd64.whl", **host)
    try:
        parse_wheel_name("not-a-wheel.whl")
        raise AssertionError("a name without its tags must be refused")
    except ValueError:
        pass
