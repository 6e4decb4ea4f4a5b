#!/usr/bin/env python3
"""Benchmark: every parser in plugins/module_utils/ on hostile input, 10 MiB.

What it measures: each parser the property tests check for linear time
(every ``assert_linear`` call in tests/unit/module_utils/**/test_*.py), on the
very input that call builds (a keyword prefix repeated, a line padded with
spaces, deep brackets, a huge CSV field, a long command line, ...). The bench
takes those (parser, input builder) pairs from the tests themselves, so it
never drifts from them: it imports the test modules with
``hostile.assert_linear`` swapped for a recorder, calls each test that uses
it (once per parametrized case), and times what was recorded.

For each (parser, input kind) it prints one row: the median of --repeat runs
at --mib MiB (default 10) in seconds, the throughput in MiB/s, and the ratio
of that time to the time at an eighth of the size (a linear parser gives
about 8, a quadratic one about 64). A parser may refuse the input with its
documented exception (one its module defines): that is timed like a result
and shown as "refused". Sizes count characters (bytes for bytes input).

Target: 10 MiB in seconds, not minutes, and linear. The exit status is 1 if
any row's ratio exceeds 24 (unless its full-size run took under --noise-s, the
timer-noise bound of assert_linear), if any run at full size takes over 60 s,
or if a parser raised an exception it does not document; else 0.

Usage:
    .venv/bin/python bench/hostile_parse.py                 # 10 MiB, 3 runs
    .venv/bin/python bench/hostile_parse.py --mib 1 --repeat 1
"""
from __future__ import annotations

import argparse
import datetime
import dis
import gc
import importlib
import inspect
import itertools
import platform
import runpy
import statistics
import sys
import time
import types
import typing as t
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE_UTILS = REPO / "plugins" / "module_utils"
TESTS = REPO / "tests"
PROPERTY_TESTS = TESTS / "unit" / "module_utils"

# As tests/conftest.py does (and Ansible at run time, through ansible.cfg's
# module_utils): the project's module_utils import as ansible.module_utils.<name>.
runpy.run_path(str(REPO / "plugins" / "module_utils_path.py"))
# What pytest puts on sys.path for these tests: tests/ (hostile.py,
# help_tables.py, filter_plugins.py) and library/ (the modules, imported by
# name); collect() adds each test's own directory (one test module imports another).
for _path in (REPO / "library", TESTS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import hostile  # noqa: E402

MIB = hostile.MIB
RATIO_BOUND = 24.0
FULL_SIZE_LIMIT_S = 60.0


class Case(t.NamedTuple):
    parser: str       # e.g. "host.nvidia_smi.parse_table"
    kind: str         # the builder's expression, or the parametrized case's id
    test: str         # "host/test_nvidia_smi::test_name[id]"
    fn: t.Callable[[t.Any], t.Any]
    build: t.Callable[[int], t.Any]


# ---- collecting the (parser, builder) pairs from the tests ---------------------------------------

_context: dict = {}
_recorded: list = []


def _record(fn, build, *args, **kwargs) -> None:
    """Stands in for hostile.assert_linear while the tests run: records, times nothing."""
    _recorded.append((dict(_context), fn, build))


def _is_project(obj) -> bool:
    """Defined in a module of plugins/module_utils/."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return (module is not None and module.__name__.startswith("ansible.module_utils.")
            and str(getattr(module, "__file__", "")).startswith(str(MODULE_UTILS)))


def _short(obj) -> str:
    """``obj`` named by its file under plugins/module_utils/ (``kv.scanner.scan_text``)."""
    return "%s.%s" % (obj.__module__.removeprefix("ansible.module_utils."), obj.__qualname__)


def _parser_of(fn, seen: set | None = None) -> str | None:
    """The project function (else class) that ``fn`` calls first: ``fn`` itself,
    or what a test's lambda, local wrapper or helper calls."""
    seen = set() if seen is None else seen
    if not isinstance(fn, types.FunctionType) or fn.__code__ in seen:
        return None
    if _is_project(fn):
        return _short(fn)
    seen.add(fn.__code__)
    env = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            env[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    found, classes, base = None, [], None
    for ins in dis.get_instructions(fn):
        obj = None
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE"):
            obj = env.get(ins.argval)
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(base, types.ModuleType):
            obj = getattr(base, ins.argval, None)
        base = obj
        if isinstance(obj, types.FunctionType):
            if _is_project(obj):
                found = _short(obj)
            elif obj.__module__ == fn.__module__ or obj.__module__.startswith("test_"):
                found = _parser_of(obj, seen)   # a test's helper
            if found:
                return found
        elif isinstance(obj, type) and _is_project(obj) and not issubclass(obj, BaseException):
            classes.append(_short(obj))
    return classes[0] if classes else None


def _expression(fn) -> str:
    """A lambda's body as written in its source, else the function's name."""
    code = fn.__code__
    if code.co_name != "<lambda>":
        return code.co_name
    spans = [p for p in code.co_positions() if None not in p and (p[0], p[2]) != (p[1], p[3])]
    try:
        lines = Path(code.co_filename).read_text(encoding="utf-8").splitlines()
        start = min((p[0], p[2]) for p in spans)
        end = max((p[1], p[3]) for p in spans)
        text = b"\n".join(line.encode() for line in lines[start[0] - 1:end[0]])
        # columns are UTF-8 byte offsets into the first and last line
        tail = len(lines[end[0] - 1].encode()) - end[1]
        text = text[start[1]:len(text) - tail]
        # a body over several lines reads as one (the spaces inside a line kept)
        return " ".join(part.strip() for part in text.decode("utf-8", "replace").splitlines())
    except (OSError, ValueError):
        return "<lambda>"


def _cases_of(argnames, argvalues, ids) -> list:
    """One parametrize mark as (id, {argname: value}) pairs, as pytest names them."""
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    out = []
    for i, value in enumerate(argvalues):
        given_id = None
        if type(value).__name__ == "ParameterSet":  # pytest.param(...)
            given_id, value = value.id, value.values
        elif len(names) == 1:
            value = (value,)
        if given_id is None and isinstance(ids, (list, tuple)) and i < len(ids):
            given_id = ids[i]
        if given_id is None and callable(ids):
            given_id = "-".join(str(ids(v)) for v in value)
        if given_id is None:
            given_id = "-".join(v if isinstance(v, str) and len(v) < 40 and v.isprintable() else "%s%d" % (n, i)
                                for n, v in zip(names, value))
        out.append((str(given_id), dict(zip(names, value))))
    return out


def collect() -> tuple[list[Case], list[str]]:
    """Every assert_linear call of the property tests, as Cases; and what could not be run."""
    hostile.assert_linear = _record   # before any test module binds the name
    skipped: list = []
    files = sorted(p for p in PROPERTY_TESTS.rglob("test_*.py") if "assert_linear" in p.read_text(encoding="utf-8"))
    for path in files:
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        module = importlib.import_module(path.stem)
        for name, test in sorted(vars(module).items()):
            if not (name.startswith("test_") and isinstance(test, types.FunctionType)
                    and test.__module__ == module.__name__ and "assert_linear" in test.__code__.co_names):
                continue
            marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
            per_mark = [_cases_of(m.args[0], m.args[1], m.kwargs.get("ids")) for m in marks]
            for combo in itertools.product(*per_mark) if per_mark else [()]:
                kwargs = {k: v for _, values in combo for k, v in values.items()}
                case_id = "-".join(i for i, _ in combo)
                label = "%s::%s%s" % (path.relative_to(PROPERTY_TESTS).with_suffix(""), name,
                                      "[%s]" % case_id if case_id else "")
                missing = set(inspect.signature(test).parameters) - set(kwargs)
                if missing:
                    skipped.append("%s: needs fixture(s) %s" % (label, ", ".join(sorted(missing))))
                    continue
                _context.clear()
                _context.update(test=label, case_id=case_id)
                before = len(_recorded)
                try:
                    test(**kwargs)
                except Exception as e:  # noqa: BLE001  (a test's own assertion or setup failed)
                    skipped.append("%s: the test raised %s: %s" % (label, type(e).__name__, e))
                if len(_recorded) == before:
                    skipped.append("%s: made no assert_linear call" % label)
    cases = []
    for ctx, fn, build in _recorded:
        parser = _parser_of(fn) or _expression(fn)
        kind = ctx["case_id"] or _expression(build)
        cases.append(Case(parser, kind, ctx["test"], fn, build))
    return cases, skipped


# ---- timing ----------------------------------------------------------------------------------------

def size_of(data) -> int:
    if isinstance(data, (str, bytes, bytearray)):
        return len(data)
    if isinstance(data, (list, tuple)):
        return sum(size_of(x) for x in data) + max(len(data) - 1, 0)
    return 0


def documented(error: BaseException) -> bool:
    """An exception class of the project's own: the parser's documented refusal."""
    return any(_is_project(cls) for cls in type(error).__mro__ if cls is not BaseException)


class Timing(t.NamedTuple):
    seconds: list[float]
    refused: str | None    # the documented exception's name, when refused
    error: str | None      # an undocumented exception


def run(fn, data, repeat: int, stop_after_s: float = float("inf")) -> Timing:
    times: list = []
    refused = None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        try:
            fn(data)
        except Exception as e:  # noqa: BLE001 - sorted below: documented or not
            elapsed = time.perf_counter() - start
            if not documented(e):
                return Timing(times + [elapsed], refused, "%s: %s" % (type(e).__name__, str(e)[:120]))
            refused = type(e).__name__
        else:
            elapsed = time.perf_counter() - start
        times.append(elapsed)
        if elapsed > stop_after_s:
            break   # one run past the limit is the finding: do not wait for more
    return Timing(times, refused, None)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=10.0, help="full input size in MiB (default 10)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per size; the median is shown (default 3)")
    ap.add_argument("--noise-s", type=float, default=0.05,
                    help="a full-size median under this passes whatever the ratio: timer noise (default 0.05, "
                         "as assert_linear)")
    ap.add_argument("-k", dest="match", default="",
                    help="only rows whose parser, input or test contains this text")
    args = ap.parse_args()
    if args.mib <= 0 or args.repeat < 1:
        ap.error("--mib must be positive and --repeat at least 1")

    full = int(args.mib * MIB)
    small = max(full // 8, 1)
    python = Path(sys.executable)
    if REPO in python.parents:
        python = python.relative_to(REPO)
    print("command: %s" % " ".join([str(python), *sys.argv]))
    print("python:  %s (%s)" % (platform.python_version(), platform.python_implementation()))
    print("date:    %s" % datetime.datetime.now().astimezone().replace(microsecond=0).isoformat())
    started = time.perf_counter()
    cases, skipped = collect()
    cases = [c for c in cases if args.match in c.parser or args.match in c.kind or args.match in c.test]
    print("inputs:  %d (parser, input) rows from the assert_linear calls of tests/unit/module_utils/ "
          "(collected in %.1f s); full size %s chars, ratio against %s chars, median of %d"
          % (len(cases), time.perf_counter() - started, format(full, ","), format(small, ","), args.repeat))
    print("target:  linear (ratio under %g) and under %g s at full size" % (RATIO_BOUND, FULL_SIZE_LIMIT_S))
    print()
    header = "%-34s %-46s %8s %10s %9s %6s  %s" % ("parser", "input", "MiB", "seconds", "MiB/s", "ratio", "verdict")
    print(header)
    print("-" * len(header))

    failures = 0
    for case in cases:
        data_small = case.build(small)
        t_small = run(case.fn, data_small, args.repeat)
        del data_small
        s_small = statistics.median(t_small.seconds)
        verdict, t_full, n_full, s_full = [], None, 0, float("nan")
        if t_small.error:
            verdict.append("ERROR at 1/8 size: " + t_small.error)
        elif s_small * 8 > FULL_SIZE_LIMIT_S:
            verdict.append("SLOW: %.1f s at 1/8 size, full size not run" % s_small)
        else:
            data_full = case.build(full)
            n_full = size_of(data_full)
            t_full = run(case.fn, data_full, args.repeat, stop_after_s=FULL_SIZE_LIMIT_S)
            del data_full
            s_full = statistics.median(t_full.seconds)
            if t_full.error:
                verdict.append("ERROR: " + t_full.error)
            if s_full > FULL_SIZE_LIMIT_S:
                verdict.append("SLOW")
        ratio = s_full / max(s_small, 1e-9)
        if not verdict and ratio > RATIO_BOUND:
            verdict.append("NOT LINEAR" if s_full >= args.noise_s else "ok (ratio is noise under %g s)" % args.noise_s)
        failed = any(not v.startswith("ok") for v in verdict)
        failures += failed
        if not verdict:
            verdict.append("ok")
        refused = (t_full.refused if t_full else None) or t_small.refused
        if refused:
            verdict.append("refused: %s" % refused)
        print("%-34s %-46s %8.2f %10.4f %9.1f %6.1f  %s" % (
            clip(case.parser, 34), clip(case.kind, 46), n_full / MIB, s_full,
            (n_full / MIB / s_full) if s_full > 0 else float("inf"), ratio, ", ".join(verdict)), flush=True)

    print()
    for note in skipped:
        print("not covered: %s" % note)
    print("%d rows, %d failed, %.0f s in all" % (len(cases), failures, time.perf_counter() - started))
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
