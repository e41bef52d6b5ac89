#!/usr/bin/env python3
"""Checks the include graph of this repository against its layering.

The folders form layers, and dependencies point one way only (down). Each
layer is drawn above the layers it includes directly ("->"); it may include
those, what they include, and so on down, and nothing else. fx/ is made of
layers of its own, drawn after the folders; a folder that includes fx/ may
include any of them:

    tools/              testdata/
      -> codegen/         -> codegen/
      -> models/          -> models/
      -> onnx/
      -> scheduling/
    codegen/            onnx/
      -> lowering/        -> lowering/
      -> quantization/
    lowering/           quantization/       scheduling/         fuzz/
      -> passes/          -> passes/          -> passes/          -> models/
                                                                  -> passes/
    passes/
      -> interpreter/
    interpreter/        models/
      -> fx/              -> fx/
    fx/                 third_party/

    inside fx/:
    fx/fx.h           fx/torchscript/   fx/pt2/
      -> fx/io/         -> fx/trace/      -> fx/io/
      -> fx/trace/
    fx/io/            fx/trace/
      -> fx/runtime/    -> fx/runtime/
    fx/runtime/
      -> fx/emit/
    fx/emit/
      -> fx/ir/
    fx/ir/

ALLOWED below holds the picture's edges; README.md's Layout section shows
the same picture (`--picture` prints it). Tests (*_test.cc) sit above
everything but the tools; the tools that serve the tests (the benchmarks)
may include testdata/ too; any file may include Catch2's wrapper,
third_party/catch.h, and libgomp's interface, third_party/libgomp.h
(shims of external libraries that include nothing of ours). Also fails on a cycle among the repository's
own files (a header that includes itself through others), on a file of fx/
that is in none of its layers, on ALLOWED not being a DAG without
redundant edges, on a picture (this one, README.md's) that differs
from ALLOWED, and on a source file other than a test over MAX_LINES
(1,500) lines.

    /usr/bin/python3 tools/check_layering.py [ROOT]      checks
    /usr/bin/python3 tools/check_layering.py --picture   prints the picture

Prints each violation and exits 1 if there is any.
"""

import difflib
import os
import re
import sys

# Which layers a layer includes directly. A layer is a top folder, or one of
# fx/'s folders (or the umbrella header fx/fx.h); a folder that lists "fx"
# may include all of fx/'s layers.
ALLOWED = {
    "tools": {"codegen", "models", "onnx", "scheduling"},
    "testdata": {"codegen", "models"},
    "codegen": {"lowering", "quantization"},
    "lowering": {"passes"},
    "quantization": {"passes"},
    "scheduling": {"passes"},
    "fuzz": {"models", "passes"},
    "passes": {"interpreter"},
    "interpreter": {"fx"},
    "models": {"fx"},
    "onnx": {"lowering"},
    "fx": set(),
    "third_party": set(),
    # Inside fx/.
    "fx/fx.h": {"fx/io", "fx/trace"},
    "fx/torchscript": {"fx/trace"},
    "fx/pt2": {"fx/io"},
    "fx/io": {"fx/runtime"},
    "fx/trace": {"fx/runtime"},
    "fx/runtime": {"fx/emit"},
    "fx/emit": {"fx/ir"},
    "fx/ir": set(),
}
# Top folders that tests may include (all but tools).
TEST_ALLOWED = {"fx", "models", "interpreter", "passes", "lowering",
                "quantization", "scheduling", "codegen", "testdata",
                "third_party", "fuzz", "onnx"}
# Headers of third_party that any file may include (Catch2's wrapper).
ANYWHERE = {"third_party/catch.h", "third_party/libgomp.h"}
# Tools that serve the tests may use their fixtures (testdata/): the
# benchmarks time the classes the tests generate. The fx tool (tools/cli/)
# may not: what it shares with the tests lives in the library
# (passes/typed_attributes.h).
TEST_TOOLS = ("tools/benchmark",)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_EXTENSIONS = (".h", ".cc", ".cpp", ".inc", ".def")
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def top(layer):
    return layer.split("/", 1)[0]


def shown(layer):
    return layer if layer.endswith(".h") else layer + "/"


def layer_of(path):
    """The layer a file belongs to: the longest key of ALLOWED that is the
    path or a folder holding it; None outside the layers."""
    best = None
    for layer in ALLOWED:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def below(layer):
    """Every layer `layer` may include: ALLOWED's edges, followed down."""
    seen = set()
    work = list(ALLOWED[layer])
    while work:
        other = work.pop()
        if other not in seen:
            seen.add(other)
            work.extend(ALLOWED.get(other, ()))
    return seen


def allowed_problems():
    """ALLOWED itself: edges to known layers of the same level, no cycle,
    no edge that other edges imply (the picture shows each edge once)."""
    problems = []
    for layer, targets in ALLOWED.items():
        for target in sorted(targets):
            if target not in ALLOWED:
                problems.append(f"ALLOWED: {layer} -> {target}: no such layer")
            elif ("/" in layer) != ("/" in target) or (
                    "/" in layer and top(layer) != top(target)):
                problems.append(
                    f"ALLOWED: {layer} -> {target}: an edge between a top "
                    "folder and a layer inside another folder")
    if problems:
        return problems
    for layer in ALLOWED:
        if layer in below(layer):
            problems.append(f"ALLOWED: {layer} includes itself through "
                            "others: the layers must form a DAG")
    if problems:
        return problems
    for layer, targets in ALLOWED.items():
        for target in sorted(targets):
            for via in sorted(targets - {target}):
                if target in below(via):
                    problems.append(
                        f"ALLOWED: {layer} -> {target} follows from "
                        f"{layer} -> {via}: drop it")
                    break
    return problems


def draw(layers):
    """The DAG of `layers` in rows, highest first: a layer sits one row
    above the highest layer it includes; siblings side by side, each with
    its edges below it."""
    height = {}

    def height_of(layer):
        if layer not in height:
            height[layer] = 1 + max(
                (height_of(t) for t in ALLOWED[layer]), default=-1)
        return height[layer]

    for layer in layers:
        height_of(layer)
    cells = {layer: [shown(layer)] + [f"  -> {shown(t)}"
                                      for t in sorted(ALLOWED[layer])]
             for layer in layers}
    width = 2 + max(len(line) for cell in cells.values() for line in cell)
    lines = []
    for h in sorted({height[layer] for layer in layers}, reverse=True):
        row = [layer for layer in layers if height[layer] == h]
        depth = max(len(cells[layer]) for layer in row)
        for i in range(depth):
            line = "".join(
                (cells[layer][i] if i < len(cells[layer]) else "").ljust(width)
                for layer in row)
            lines.append(line.rstrip())
    return lines


def picture():
    lines = draw([layer for layer in ALLOWED if "/" not in layer])
    for folder in [layer for layer in ALLOWED if "/" not in layer]:
        inside = [layer for layer in ALLOWED if top(layer) == folder and
                  layer != folder]
        if inside:
            lines += ["", f"inside {folder}/:"] + draw(inside)
    return "\n".join(lines) + "\n"


def picture_problems(root):
    """The docstring's and README.md's pictures against ALLOWED."""
    expected = picture()
    problems = []
    indented = "".join("    " + line if line.strip() else line
                       for line in expected.splitlines(True))
    if indented not in __doc__:
        problems.append(
            "tools/check_layering.py: the picture in its docstring differs "
            "from ALLOWED: make it what --picture prints, indented by four")
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        blocks = FENCED.findall(f.read())
    if expected in blocks:
        return problems
    # The block naming the most folders of the picture.
    folders = set(re.findall(r"[\w.]+/", expected))
    closest = max(blocks, default="", key=lambda b: len(
        folders & set(re.findall(r"[\w.]+/", b))))
    diff = "".join(difflib.unified_diff(
        closest.splitlines(True), expected.splitlines(True),
        "README.md", "ALLOWED"))
    problems.append(
        "README.md's layer picture differs from ALLOWED in "
        "tools/check_layering.py: make its block what `/usr/bin/python3 "
        "tools/check_layering.py --picture` prints\n" + diff.rstrip())
    return problems


def sources(root):
    for folder in sorted(layer for layer in ALLOWED if "/" not in layer):
        top_dir = os.path.join(root, folder)
        for directory, _, files in sorted(os.walk(top_dir)):
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


def include_problems(path, included, layer, is_test):
    target = layer_of(included)
    if target is None or target == layer or included in ANYWHERE:
        return []
    if top(target) == top(layer) and "/" in target and not is_test:
        # Between the layers of one folder.
        source, reached = layer, target
        allowed = below(layer)
    else:
        source, reached = top(layer), top(target)
        allowed = TEST_ALLOWED if is_test else below(source)
        if path.startswith(TEST_TOOLS):
            allowed = allowed | {"testdata"} | below("testdata")
    if reached in allowed:
        return []
    return [f"{path} includes {included}: {shown(source)} may not depend on "
            f"{shown(reached)} (allowed: "
            f"{', '.join(shown(a) for a in sorted(allowed)) or 'nothing'})"]


# No source file but a test holds more than this many lines.
MAX_LINES = 1500


def main():
    if sys.argv[1:] == ["--picture"]:
        sys.stdout.write(picture())
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    problems = allowed_problems()
    if problems:
        for problem in problems:
            print(problem)
        return 1
    problems += picture_problems(root)
    graph = {}
    files = list(sources(root))
    known = set(files)
    folders = {layer for layer in ALLOWED if "/" in layer}
    for path in files:
        layer = layer_of(path)
        is_test = path.endswith("_test.cc")
        if not is_test and any(top(f) == layer for f in folders):
            problems.append(
                f"{path} is in none of {layer}/'s layers: move it into one of "
                + ", ".join(shown(f) for f in sorted(folders)
                            if top(f) == layer))
        if not is_test:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = sum(1 for _ in f)
            if lines > MAX_LINES:
                problems.append(
                    f"{path} has {lines} lines, over {MAX_LINES}: split it by "
                    "what it holds (a file per part, their shared layer in a "
                    "header of its own)")
        edges = []
        for included in includes(root, path):
            if included in known:
                edges.append(included)
            problems += include_problems(path, included, layer, is_test)
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
