#!/usr/bin/env python3
"""Checks the include graph of this repository against its layering.

The folders form layers, and dependencies point one way only (down):

    tools, fuzz                        the command-line tool, benchmarks, fuzzers
    codegen                            classes generated at build time
    lowering, quantization,            lowering to oneDNN (fx_onednn operators);
    scheduling                         int8 quantization (fx_quant operators);
                                       pipeline stages across processes (c10d)
    passes                             graph transformations and analyses
    interpreter                        Interpreter, Transformer, ShapeProp
    models                             the bundled models (the demo, the zoo)
    fx                                 the IR, tracer, GraphModule, parser, save/load

A file may include headers of its own folder and of the folders listed for
it in ALLOWED below. Tests (*_test.cc) sit above everything but the tools.
Also fails on a cycle among the repository's own files (a header that
includes itself through others).

    /usr/bin/python3 tools/check_layering.py [ROOT]

Prints each violation and exits 1 if there is any.
"""

import os
import re
import sys

# Which other folders a folder's files may include.
ALLOWED = {
    "fx": set(),
    "models": {"fx"},
    "interpreter": {"fx"},
    "passes": {"fx", "interpreter"},
    "lowering": {"fx", "interpreter", "passes"},
    "quantization": {"fx", "interpreter", "passes"},
    "scheduling": {"fx", "interpreter", "passes"},
    "codegen": {"fx", "interpreter", "passes", "lowering", "quantization"},
    "fuzz": {"fx", "models", "interpreter", "passes"},
    "tools": {"fx", "models", "interpreter", "passes", "lowering",
              "quantization", "scheduling", "codegen"},
    "testdata": {"fx", "models", "interpreter", "passes", "lowering",
                 "quantization", "codegen"},
    "third_party": set(),
}
# Tests include what they test and the fixtures above it.
TEST_ALLOWED = {"fx", "models", "interpreter", "passes", "lowering",
                "quantization", "scheduling", "codegen", "testdata",
                "third_party", "fuzz"}
# Headers of third_party that any file may include (Catch2's wrapper).
ANYWHERE = {"third_party/catch.h"}
# Tools that serve the tests may use their fixtures (testdata/): the
# benchmarks time the classes the tests generate. The fx tool (tools/cli/)
# may not: what it shares with the tests lives in the library
# (passes/typed_attributes.h).
TEST_TOOLS = ("tools/benchmark",)
TEST_TOOL_ALLOWED = ALLOWED["tools"] | {"testdata"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_EXTENSIONS = (".h", ".cc", ".cpp", ".inc", ".def")


def sources(root):
    for folder in sorted(ALLOWED):
        top = os.path.join(root, folder)
        for directory, _, files in sorted(os.walk(top)):
            for name in sorted(files):
                if name.endswith(SOURCE_EXTENSIONS):
                    path = os.path.join(directory, name)
                    yield os.path.relpath(path, root)


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Includes inside string literals (code the generator writes) are not
    # this file's own: keep only those at the start of a line.
    return [m.group(1) for m in INCLUDE.finditer(text)]


def folder_of(path):
    return path.split("/", 1)[0]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    problems = []
    graph = {}
    files = list(sources(root))
    known = set(files)
    for path in files:
        folder = folder_of(path)
        is_test = path.endswith("_test.cc")
        allowed = TEST_ALLOWED if is_test else ALLOWED[folder]
        if path.startswith(TEST_TOOLS):
            allowed = TEST_TOOL_ALLOWED
        edges = []
        for included in includes(root, path):
            target = folder_of(included)
            if included in known:
                edges.append(included)
            if target not in ALLOWED or target == folder or included in ANYWHERE:
                continue
            if target not in allowed:
                problems.append(
                    f"{path} includes {included}: {folder}/ may not depend on "
                    f"{target}/ (allowed: {', '.join(sorted(allowed)) or 'nothing'})")
        graph[path] = edges

    # Cycles among files: Tarjan's strongly connected components.
    index = {}
    low = {}
    stack = []
    on_stack = set()
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, []):
                problems.append("include cycle: " + " -> ".join(sorted(component)))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)

    for problem in problems:
        print(problem)
    print(f"checked {len(files)} files: {len(problems)} layering problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
