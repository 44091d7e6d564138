"""Compares two pytest --junitxml reports of vLLM's tests: stock vLLM vs mediaref's hook in place.

    python3 scripts/compare_vllm_test_runs.py STOCK.xml HOOKED.xml [--allow FILE]

Prints the counts of each run (passed / failed / skipped / errors) and every test that passed on
stock vLLM and did not pass with the hook (failed, errored, skipped, or was not run at all), each
with the first line of its failure message. Exits 1 when such a test is not listed in the
allowlist (default ``tests/data/vllm_tests_known_differences.txt``: one pytest node id a line,
``# reason`` after it), 2 on unreadable input, else 0. Tests that fail or skip on both runs do not
count. Standard library only, so any python3 runs it.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ALLOW = REPO / "tests" / "data" / "vllm_tests_known_differences.txt"
STATUSES = ("passed", "failed", "skipped", "errors")


def _node_id(case: ET.Element) -> str:
    """The pytest node id (``tests/x/test_y.py::TestZ::test_w[p]``) of a junit ``testcase``."""
    classname = case.get("classname", "")
    name = case.get("name", "")
    file = case.get("file")  # present with junit_family=xunit1
    if file and not classname:  # a module that could not be collected
        return file
    if file:
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
        parts = [file, *rest.split(".")] if rest else [file]
        return "::".join([*parts, name])
    if not classname:  # a collection error: name is the module's dotted path
        return name
    return f"{classname}::{name}"


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def load(path: Path) -> dict[str, tuple[str, str]]:
    """node id -> (status, first line of the failure/error/skip message)."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        failure, error, skipped = (case.find(tag) for tag in ("failure", "error", "skipped"))
        if failure is not None:
            status, why = "failed", failure
        elif error is not None:
            status, why = "errors", error
        elif skipped is not None:
            status, why = "skipped", skipped
        else:
            status, why = "passed", None
        message = ""
        if why is not None:
            message = _first_line(why.get("message")) or _first_line(why.text)
            if message == "collection failure":  # the cause is the traceback's last `E` line
                causes = [line for line in (why.text or "").splitlines() if line.startswith("E ")]
                message = _first_line(causes[-1][1:]) if causes else message
        node = _node_id(case)
        # A test that failed and then errored in teardown keeps its first (worse) outcome.
        if node not in results or results[node][0] == "passed":
            results[node] = (status, message)
    return results


def load_allowlist(path: Path) -> dict[str, str]:
    allowed: dict[str, str] = {}
    if not path.exists():
        return allowed
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        node, _, reason = line.partition("#")
        allowed[node.strip()] = reason.strip()
    return allowed


def _collection_error(results: dict[str, tuple[str, str]], node: str) -> str:
    """The message of a collection error of ``node``'s module in a run, if there is one."""
    module = node.split("::", 1)[0]
    dotted = module[:-3].replace("/", ".") if module.endswith(".py") else module
    for other, (status, message) in results.items():
        if status == "errors" and "::" not in other and other in (module, dotted):
            return message
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stock", type=Path, help="junit xml of the run on stock vLLM")
    parser.add_argument("hooked", type=Path, help="junit xml of the run with mediaref's hook")
    parser.add_argument("--allow", type=Path, default=DEFAULT_ALLOW, help="allowlist file")
    args = parser.parse_args(argv)
    try:
        stock, hooked = load(args.stock), load(args.hooked)
    except (OSError, ET.ParseError) as exc:
        print(f"cannot read the junit reports: {exc}", file=sys.stderr)
        return 2
    allowed = load_allowlist(args.allow)

    for label, results in (("stock vLLM", stock), ("mediaref hook", hooked)):
        counts = Counter(status for status, _ in results.values())
        line = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
        print(f"{label:14s}: {len(results)} tests: {line}")

    regressions = []
    for node, (status, _) in sorted(stock.items()):
        if status != "passed":
            continue
        if node in hooked:
            hooked_status, message = hooked[node]
            if hooked_status == "passed":
                continue
        else:
            hooked_status = "not run"
            message = _collection_error(hooked, node) or "absent from the hooked run's report"
        regressions.append((node, hooked_status, message))

    fixed = [
        n for n, (s, _) in stock.items() if s != "passed" and hooked.get(n, ("",))[0] == "passed"
    ]
    unexpected = [r for r in regressions if r[0] not in allowed]
    print(
        f"\n{len(regressions)} test(s) pass on stock vLLM and do not pass with the hook"
        f" ({len(regressions) - len(unexpected)} in the allowlist {args.allow.name}):"
    )
    for node, status, message in regressions:
        mark = "allowed " if node in allowed else "NEW     "
        print(f"  {mark}{status:8s} {node}\n           {message}")
        if node in allowed:
            print(f"           reason: {allowed[node]}")
    if fixed:
        print(f"\n{len(fixed)} test(s) do not pass on stock vLLM and pass with the hook:")
        for node in sorted(fixed):
            print(f"  {node}")
    regressed = {node for node, _, _ in regressions}
    stale = sorted(node for node in allowed if node not in regressed)
    if stale:
        print(f"\n{len(stale)} allowlist entr(y/ies) no longer differ(s) (could be removed):")
        for node in stale:
            print(f"  {node}")
    if unexpected:
        print(f"\nFAIL: {len(unexpected)} difference(s) not in {args.allow}")
        return 1
    print("\nOK: no difference outside the allowlist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
