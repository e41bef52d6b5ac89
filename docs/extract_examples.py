#!/usr/bin/env python3
"""Pulls the C++ examples out of the documentation, so that they compile.

    /usr/bin/python3 docs/extract_examples.py OUT.inc README.md docs/*.md

Every ```cpp block of the pages given must have, on the line before it
(blank lines aside), one of

    <!-- example: NAME -->          compiled and run by //docs:examples_test
    <!-- not compiled: WHY -->      shown only (keep these rare)

and a block of any other language may be marked <!-- output: NAME -->: its
text (its lines joined by newlines, with none at the end, as
fx::Graph::to_string prints) becomes the string constant
docs_P::output_NAME, for a check to compare with what the code prints.

The examples of a page go, in page order, into one C++ namespace named after
the page (README.md: docs_readme, docs/writing_transformations.md:
docs_writing_transformations), so a later block of a page may use what an
earlier one defined. Each block is a complete snippet: its #include lines are
hoisted to the top of OUT, the rest is top-level code (functions, classes).
#line directives point compiler errors at the page and line.

For each example NAME of page P, OUT declares `void docs_P::check_NAME();`
and lists it in the X-macro DOCS_EXAMPLES: docs/examples_test.cc defines
the check (it calls the example and asserts what it returns or prints) and
makes a test case of each, so an example without a check does not link. Exits 1, naming the page and line, on a
block without a marker, a repeated or malformed name, or an unclosed block.
"""

import os
import re
import sys

FENCE = re.compile(r"^```\s*([A-Za-z0-9_+-]*)\s*$")
EXAMPLE = re.compile(r"^<!--\s*example:\s*([A-Za-z_][A-Za-z0-9_]*)\s*-->$")
OUTPUT = re.compile(r"^<!--\s*output:\s*([A-Za-z_][A-Za-z0-9_]*)\s*-->$")
NOT_COMPILED = re.compile(r"^<!--\s*not compiled:\s*\S.*-->$")
INCLUDE = re.compile(r"^\s*#\s*include\b")


def namespace_of(path):
    stem = os.path.splitext(os.path.basename(path))[0].lower()
    return "docs_" + re.sub(r"[^a-z0-9_]", "_", stem)


def blocks_of(path, problems):
    """Yields (kind, name, first_line, lines) for each ```cpp block marked
    as an example (kind "example") and each block marked as an output."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    marker = None  # (kind, name) of the last non-blank line, if a marker
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if not fence:
            if line.strip():
                m = EXAMPLE.match(line.strip())
                o = OUTPUT.match(line.strip())
                if m:
                    marker = ("example", m.group(1))
                elif o:
                    marker = ("output", o.group(1))
                elif NOT_COMPILED.match(line.strip()):
                    marker = ("not compiled", None)
                else:
                    marker = None
            i += 1
            continue
        language = fence.group(1)
        start = i + 1
        end = start
        while end < len(lines) and not re.match(r"^```\s*$", lines[end]):
            end += 1
        if end == len(lines):
            problems.append(f"{path}:{i + 1}: a ``` block that is never closed")
            return
        if marker is not None and marker[0] == "output":
            yield "output", marker[1], start + 1, lines[start:end]
        elif language in ("cpp", "c++", "cc"):
            if marker is None:
                problems.append(
                    f"{path}:{i + 1}: a ```cpp block needs "
                    "<!-- example: NAME --> on the line before it (and a "
                    "check_NAME in docs/examples_test.cc), or "
                    "<!-- not compiled: WHY -->")
            elif marker[0] == "example":
                yield "example", marker[1], start + 1, lines[start:end]
        elif marker is not None and marker[0] == "example":
            problems.append(
                f"{path}:{i + 1}: <!-- example: {marker[1]} --> marks a "
                f"```{language} block; only ```cpp blocks are compiled")
        marker = None
        i = end + 1


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out_path, pages = sys.argv[1], sys.argv[2:]
    problems = []
    includes = []  # (line text, page, line number), first occurrence each
    seen_includes = set()
    bodies = []    # (namespace, [text lines])
    checks = []    # (page, namespace, name)
    names = set()
    for page in pages:
        namespace = namespace_of(page)
        body = []
        for kind, name, first, lines in blocks_of(page, problems):
            if (namespace, kind, name) in names:
                problems.append(f"{page}:{first - 1}: {kind} '{name}' "
                                "appears twice on this page")
                continue
            names.add((namespace, kind, name))
            if kind == "output":
                text = "\n".join(lines)
                if ")fx_doc\"" in text:
                    problems.append(f"{page}:{first}: output '{name}' holds "
                                    "the raw string's delimiter")
                body.append(f'#line {first - 1} "{page}"')
                body.append(f'inline constexpr const char* output_{name} = '
                            f'R"fx_doc({text})fx_doc";')
                continue
            checks.append((page, namespace, name))
            body.append(f'#line {first} "{page}"')
            for offset, text in enumerate(lines):
                if INCLUDE.match(text):
                    key = text.strip()
                    if key not in seen_includes:
                        seen_includes.add(key)
                        includes.append((key, page, first + offset))
                    body.append("")  # keeps the line numbers right
                else:
                    body.append(text)
        if body:
            bodies.append((namespace, body))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1

    out = ["// Generated by docs/extract_examples.py from the documentation's",
           "// ```cpp blocks: do not edit. See docs/examples_test.cc.",
           ""]
    for text, page, number in includes:
        out.append(f'#line {number} "{page}"')
        out.append(text)
    out.append("")
    generated = os.path.join("docs", os.path.basename(out_path))

    def back_to_generated():
        # Errors in the lines that follow point at the generated file.
        out.append(f'#line {len(out) + 2} "{generated}"')

    back_to_generated()
    for namespace, body in bodies:
        out.append(f"namespace {namespace} {{")
        out.extend(body)
        back_to_generated()
        out.append(f"}}  // namespace {namespace}")
        out.append("")
    out.append("// One check per example, defined in docs/examples_test.cc.")
    for page, namespace, name in checks:
        out.append(f"namespace {namespace} {{ void check_{name}(); }}")
    out += ["",
            "// X(namespace, name, page) for each example, in page order.",
            "#define DOCS_EXAMPLES(X) \\"]
    for page, namespace, name in checks:
        out.append(f'  X({namespace}, {name}, "{page}") \\')
    out += ["", ""]
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
