"""The HLO texts of XLA's own parser tests, and what XLA's parser makes of each: data/corpus/hlo_parser_tests.

    /path/to/venv-with-jaxlib/bin/python benchmarks/hlo_parser_tests.py hlo_parser_test.cc \\
        --repo ROCm/xla --path xla/hlo/parser/hlo_parser_test.cc --commit SHA [--out data/corpus/hlo_parser_tests]

Input: a copy of ``xla/hlo/parser/hlo_parser_test.cc`` (``git show <commit>:<path>`` in a snapshot of
openxla/xla, or of ROCm/xla, which carries its history). Every C++ raw string ``R"(...)"`` of it (the
round-trip cases of its TestData tables, the inputs and outputs of its non-round-trip cases, the texts
of its TEST_F bodies) and every plain string literal that starts with ``HloModule`` is one text, named
by the table entry or test that holds it (``#2`` ... when a test holds several).

Each text goes to XLA's text parser as the nightly's figures are checked against it
(``jaxlib._hlo.hlo_module_from_text``, which is ``ParseAndReturnUnverifiedModule``), in a child
process: a text that makes that XLA abort (a CHECK failure its newer versions turned into an error) is
recorded as rejected, ``aborted``. Accepted: the module's name, computations, instructions (what the
HloModule holds: nested instructions and the computations XLA builds for syntax sugar included), its
entry computation, fusion instructions and collectives (the rule of ``kernel.collectives``: each
collective opcode once, async-start/update/done not, the op an async computation wraps counted).
Rejected: the first line of XLA's message. ``test_asserts_error`` says whether the test (TEST_F body)
holding the text asserts a parse error; XLA versions differ (the test file is newer than jaxlib's XLA),
so it is kept beside XLA's own verdict, not instead of it.

Texts the test file's XLA takes and jaxlib's older XLA does not, for syntax that adds no instruction, get
XLA's figures of an equivalent text (``xla_parser_equivalent``, saying which): a non-round-trip input with
compact tuple accesses (``p#1``) those of its expected output, which spells the get-tuple-elements out; a
text with a module or instruction attribute jaxlib does not know (``debug_attributes``, ``is_stable``,
``has_dynamic_root``) those of the same text without it.

Writes ``<out>/hlo_parser_test.jsonl.gz`` (one ``{"id", "text"}`` a line, ``gzip -9n``) and
``<out>/MANIFEST.json``. Needs jaxlib (any environment with it; the project's own venv has none).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LITERAL = re.compile(r'R"([^(\s]{0,16})\(|"((?:[^"\\\n]|\\.)*)"|//[^\n]*|/\*.*?\*/', re.S)
_CONTEXT = re.compile(r"^(?:(?:TEST_F|TEST_P|TEST)\((\w+),\s*(\w+)\)|std::vector<\w+> (\w+)\(\))", re.M)
# A TEST_F body asserting that parsing fails.
_ASSERTS_ERROR = re.compile(r"EXPECT_NE\(absl::OkStatus|EXPECT_FALSE\([^;]*ok\(\)|ASSERT_FALSE\([^;]*ok\(\)|"
                            r"StatusIs\(|status\(\)\.message\(\)|Not\(IsOk")
COLLECTIVES = {"kAllReduce": "all-reduce", "kAllGather": "all-gather", "kAllToAll": "all-to-all",
               "kRaggedAllToAll": "ragged-all-to-all", "kReduceScatter": "reduce-scatter",
               "kCollectivePermute": "collective-permute", "kCollectiveBroadcast": "collective-broadcast",
               "kAllReduceStart": "all-reduce-start", "kAllGatherStart": "all-gather-start",
               "kCollectivePermuteStart": "collective-permute-start", "kSend": "send", "kRecv": "recv"}

_WORKER = r"""
import json, re, sys
from jaxlib import _hlo
texts = json.load(open(sys.argv[1]))
for i in range(int(sys.argv[2]), len(texts)):
    print(json.dumps({"i": i, "started": True}), flush=True)
    try:
        m = _hlo.hlo_module_from_text(texts[i])
    except Exception as e:
        print(json.dumps({"i": i, "accepted": False, "error": str(e)}), flush=True)
        continue
    comps = list(m.computations())
    ops = {}
    for c in comps:
        for ins in c.instructions():
            op = str(ins.opcode).removeprefix("HloOpcode.")
            ops[op] = ops.get(op, 0) + 1
    entry = re.search(r"(?m)^ENTRY %?(\S+)", m.to_string())
    print(json.dumps({"i": i, "accepted": True, "name": m.name, "computations": len(comps),
                      "instructions": sum(ops.values()), "entry": entry[1] if entry else None,
                      "opcodes": ops}), flush=True)
"""


def texts_of(source: str) -> list[dict]:
    """Every raw string and HloModule literal of the test file, with the test or table entry holding it."""
    contexts = [(m.start(), f"{m[1]}.{m[2]}" if m[1] else m[3], bool(m[1])) for m in _CONTEXT.finditer(source)]
    bodies = {start: source[start : nxt] for (start, _, _), (nxt, _, _) in zip(contexts, contexts[1:] + [(len(source),)*3])}
    out, pos, last_plain = [], 0, None
    while m := _LITERAL.search(source, pos):
        tok = m[0]
        pos = m.end()
        if tok.startswith(("//", "/*")):
            continue
        if tok.startswith('R"'):
            end = source.find(f"){m[1]}\"", m.end())
            text, pos = source[m.end() : end], end + len(m[1]) + 2
        elif m[2].startswith("HloModule"):
            text = m[2].encode().decode("unicode_escape")
        else:
            last_plain = m[2]
            continue
        start, name, is_test = max((c for c in contexts if c[0] <= m.start()), default=(0, "", False))
        out.append({"text": text, "where": name, "entry": None if is_test else last_plain, "is_test": is_test,
                    "cc_line": source.count("\n", 0, m.start()) + 1,
                    "test_asserts_error": bool(is_test and _ASSERTS_ERROR.search(bodies[start]))})
    seen: dict[str, int] = {}
    for item in out:  # ids: the table entry (its name, /input and /output of a non-round-trip one) or the test
        base = f"{item['where']}/{item['entry']}" if item["entry"] else item["where"]
        k = seen[base] = seen.get(base, 0) + 1
        item["id"] = base if k == 1 else f"{base}#{k}"
    for item in out:
        if item["id"].startswith("CreateNonRoundtripTestCases/"):
            item["id"] = item["id"].replace("#2", "/output") if item["id"].endswith("#2") else item["id"] + "/input"
    return out


def xla_verdicts(texts: list[str], python: str, hang_seconds: float = 60) -> list[dict]:
    """XLA's parser on each text, in child processes (one restarted past a text that makes XLA abort, or hang:
    what such a text does is undefined behaviour in that XLA, a crash one run, a hang or a module another)."""
    tmp = ROOT / "benchmarks" / "out" / "hlo_parser_tests.json"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps(texts))
    got: dict[int, dict] = {}
    start = 0
    while start < len(texts):
        try:
            p = subprocess.run([python, "-c", _WORKER, str(tmp), str(start)], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=hang_seconds)
            stdout, stderr = p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            stdout, stderr = (x.decode() if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
        started = None
        for line in stdout.splitlines():
            r = json.loads(line)
            if r.pop("started", False):
                started = r["i"]
            else:
                got[r.pop("i")] = r
        if started is None or started in got:
            break
        fatal = [ln for ln in stderr.splitlines() if ln.startswith(("F0", "terminate", "vector::"))]
        got[started] = {"accepted": False, "aborted": True, "error": (fatal or ["the process aborted"])[0]}
        start = started + 1
    return [got[i] for i in range(len(texts))]


# Attributes newer than jaxlib's XLA that add no instruction: the text without them is the equivalent.
_NEWER_ATTRIBUTES = re.compile(r",\s*debug_attributes=\{.*?\n\}|,\s*is_stable=\w+|,\s*has_dynamic_root=\w+", re.S)


def equivalents(items: list[dict], verdicts: list[dict]) -> dict[int, tuple[str, str]]:
    """{index: (how, equivalent text)} for the texts jaxlib rejects that have one (module docstring)."""
    by_id = {t["id"]: t for t in items}
    out = {}
    for i, (item, verdict) in enumerate(zip(items, verdicts)):
        if verdict["accepted"] or item["test_asserts_error"]:
            continue
        if item["id"].endswith("/input") and "#" in item["text"]:
            output = item["id"].removesuffix("/input") + "/output"
            out[i] = (f"XLA's figures of {output}, the output the test expects of this input", by_id[output]["text"])
        elif _NEWER_ATTRIBUTES.search(item["text"]):
            attrs = sorted({m[0].split("=")[0].strip(", \n") for m in _NEWER_ATTRIBUTES.finditer(item["text"])})
            out[i] = (f"XLA's figures of this text without {', '.join(attrs)} (newer than jaxlib's XLA)",
                      _NEWER_ATTRIBUTES.sub("", item["text"]))
    return out


def figures(verdict: dict) -> dict:
    if not verdict["accepted"]:
        error = re.sub(r"^F\d+ [\d:.]+\s+\d+ ", "", verdict["error"])  # an abort's time and thread id: not kept
        error = error.replace("Syntax error when trying to parse the text as a ", "")
        lines = [ln.strip() for ln in error.splitlines() if ln.strip()]
        return {"accepted": False, "error": " ".join(lines[:2])[:300], **({"aborted": True} if verdict.get("aborted") else {})}
    ops = verdict["opcodes"]
    collectives = {COLLECTIVES[k]: n for k, n in sorted(ops.items()) if k in COLLECTIVES}
    return {"accepted": True, "name": verdict["name"], "computations": verdict["computations"],
            "instructions": verdict["instructions"], "entry": verdict["entry"], "fusions": ops.get("kFusion", 0),
            "collectives": collectives}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cc", type=Path)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "corpus" / "hlo_parser_tests")
    args = ap.parse_args()
    import jaxlib  # noqa: F401 - fail early without it

    source = args.cc.read_text()
    items = texts_of(source)
    verdicts = xla_verdicts([t["text"] for t in items], sys.executable)
    equal = equivalents(items, verdicts)
    equal_verdicts = dict(zip(equal, xla_verdicts([text for _, text in equal.values()], sys.executable)))
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "hlo_parser_test.jsonl"
    data.write_text("".join(json.dumps({"id": t["id"], "text": t["text"]}) + "\n" for t in items))
    subprocess.run(["gzip", "-9nf", str(data)], check=True)
    from importlib.metadata import version

    manifest = {
        "about": (f"The HLO texts of XLA's own parser tests, {len(items)} of them, and what XLA's parser (jaxlib "
                  f"{version('jaxlib')} _hlo.hlo_module_from_text, i.e. ParseAndReturnUnverifiedModule) makes of each; "
                  "written by benchmarks/hlo_parser_tests.py, whose docstring says how. Texts in "
                  "hlo_parser_test.jsonl.gz (gzip -9n), one {id, text} a line; sha256 and bytes are of each text "
                  "(UTF-8). ROCm/xla is AMD's fork of openxla/xla (Apache-2.0) and carries its history: the commit "
                  "is upstream XLA's. tests/test_hlo_parser_tests.py holds the parser to these figures."),
        "repo": args.repo, "path": args.path, "commit": args.commit, "licence": "Apache-2.0",
        "file": "hlo_parser_test.jsonl.gz",
        "texts": [{"id": t["id"], "cc_line": t["cc_line"], "test_asserts_error": t["test_asserts_error"],
                   "sha256": hashlib.sha256(t["text"].encode()).hexdigest(), "bytes": len(t["text"].encode()),
                   "xla_parser": figures(v),
                   **({"xla_parser_equivalent": {"how": equal[i][0], **figures(equal_verdicts[i])}} if i in equal else {})}
                  for i, (t, v) in enumerate(zip(items, verdicts))],
    }
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    accepted = sum(v["accepted"] for v in verdicts)
    print(f"{len(items)} texts: XLA accepts {accepted}, rejects {len(items) - accepted} "
          f"({sum(bool(v.get('aborted')) for v in verdicts)} by aborting)")


if __name__ == "__main__":
    main()
