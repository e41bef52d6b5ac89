#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for this project's headers (docs/Doxyfile).

The headers document their declarations with plain `//` comments, which
Doxygen ignores. This filter prints a header with those comments marked as
documentation, line for line (so Doxygen's line numbers stay right), and
changes nothing else:

- the comment block that opens a file documents the file
  (`/// ... \\file`);
- a comment block directly above a declaration at namespace or class scope
  (no blank line between) documents it (`///`);
- a comment after a member or enumerator on its line (`int x = 0;  // ...`),
  and comment lines continuing it in the same column, document that member
  (`///<`);
- every other comment stays a plain comment: comments inside function
  bodies, section headings (`// --- Creating nodes ---`), `// namespace fx`.

Inside documentation, lines indented further than the block's own text
(examples, printed graphs, tables) are preformatted (\\code{.unparsed}),
except list items indented by less than four and their continuation lines;
elsewhere the characters Doxygen would read as commands or HTML
(\\ @ < > & # % $, and :: not after a name) are escaped, except inside
`code spans` (where only %word needs it). Deterministic: the output depends
only on the input.

    /usr/bin/python3 docs/doxygen_filter.py HEADER
"""

import re
import sys

SPECIAL = re.compile(r"([\\@<>&#%$])")
LIST_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)(\s+)")
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:")
# "// --- Creating nodes ---": a section heading, not documentation.
HEADING = re.compile(r"^\s*//\s*-{2,}\s.*-{2,}\s*$")
SCOPE_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s+\"C\"")


def split_comment(line):
    """Returns (code, comment) where comment starts at the first `//` outside
    string and character literals and block comments, or (line, None)."""
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c in "\"'":
            quote = c
            i += 1
            while i < n and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
        elif line.startswith("/*", i):
            end = line.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif line.startswith("//", i):
            return line[:i], line[i:]
        else:
            i += 1
    return line, None


def code_only(line, in_block_comment):
    """The code of a line without literals and comments (for brace
    counting), and whether a block comment is still open at its end."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if in_block_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i = end + 2
            in_block_comment = False
            continue
        c = line[i]
        if c in "\"'":
            quote = c
            i += 1
            while i < n and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
            out.append(" ")
        elif line.startswith("/*", i):
            in_block_comment = True
            i += 2
        elif line.startswith("//", i):
            break
        else:
            out.append(c)
            i += 1
    return "".join(out), in_block_comment


def scope_levels(lines):
    """For each line, whether it starts at namespace or class scope (every
    enclosing brace is a namespace, class, struct, union or enum body)."""
    at_scope = []
    stack = []  # True for a scope brace, False for a body or initializer
    head = ""
    in_block_comment = False
    for line in lines:
        at_scope.append(all(stack))
        code, in_block_comment = code_only(line, in_block_comment)
        if code.lstrip().startswith("#"):
            continue
        for c in code:
            if c == "{":
                stack.append(bool(SCOPE_HEAD.search(head)) and "=" not in head)
                head = ""
            elif c == "}":
                if stack:
                    stack.pop()
                head = ""
            elif c == ";":
                head = ""
            else:
                head += c
    return at_scope


def escape(text, in_code):
    """Escapes Doxygen's special characters outside `code spans`; returns
    the text and whether a code span is still open at its end."""
    out = []
    for part in re.split(r"(`)", text):
        if part == "`":
            in_code = not in_code
            out.append(part)
        elif in_code:
            # Doxygen drops the % of %word even in a code span, not of %%.
            out.append(re.sub(r"%(?=\w)", "%%", part))
        else:
            part = SPECIAL.sub(r"\\\1", part)
            # "::name" after no identifier is an explicit link request.
            out.append(re.sub(r"(?<![\w])::", r"\\::", part))
    return "".join(out), in_code


def comment_text(line):
    """(indent before //, text after // and one space)."""
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    text = stripped[2:]
    return indent, text


def document(block, marker, file_doc=False):
    """Rewrites the lines of a comment block as documentation."""
    texts = [comment_text(line) for line in block]
    # The block's own text starts after "// " (one space).
    out = []
    in_code = False
    in_preformatted = False
    list_indent = None  # the column of a list item's text, while in a list
    for index, (indent, text) in enumerate(texts):
        body = text[1:] if text.startswith(" ") else text
        if not body.strip():
            # A blank comment line ends a list; it stays inside preformatted text.
            list_indent = None
            out.append([indent + marker, "", ""])
            continue
        leading = len(body) - len(body.lstrip(" "))
        item = LIST_ITEM.match(body)
        if leading == 0 or (item and leading < 4 and not in_preformatted):
            # A list item (flush, or indented less than code) starts a list;
            # any other flush line ends one.
            list_indent = len(item.group(0)) if item else None
            preformatted = False
        else:
            preformatted = leading >= 2 and leading != list_indent
        if preformatted:
            if not in_preformatted:
                # Open on the line before when there is one (line count).
                if out and not out[-1][2]:
                    out[-1][2] = " \\code{.unparsed}"
                    out.append([indent + marker, " " + body, ""])
                else:
                    out.append([indent + marker, " \\code{.unparsed} " + body, ""])
                in_preformatted = True
            else:
                out.append([indent + marker, " " + body, ""])
            continue
        if in_preformatted:
            out[-1][2] += " \\endcode"
            in_preformatted = False
        escaped, in_code = escape(body, in_code)
        out.append([indent + marker, " " + escaped, ""])
    if in_preformatted:
        out[-1][2] += " \\endcode"
    if file_doc:
        out[-1][2] += " \\file"
    return ["".join(parts) for parts in out]


def is_declaration(line):
    stripped = line.strip()
    return bool(stripped) and not (
        stripped.startswith("//") or stripped.startswith("#") or
        stripped.startswith("}") or ACCESS.match(line) or
        stripped.startswith("namespace"))


def filter_lines(lines):
    at_scope = scope_levels(lines)
    out = list(lines)
    seen_code = False
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("//") and not stripped.startswith("///"):
            j = i
            while j < n and lines[j].strip().startswith("//"):
                j += 1
            following = lines[j] if j < n else ""
            if at_scope[i] and is_declaration(following):
                start = i
                while start < j and HEADING.match(lines[start]):
                    start += 1  # stays a plain comment
                if start < j:
                    out[start:j] = document(lines[start:j], "///")
            elif not seen_code:
                out[i:j] = document(lines[i:j], "///", file_doc=True)
            i = j
            continue
        if stripped:
            seen_code = True
        code, comment = split_comment(line)
        if (comment is not None and not comment.startswith("///") and
                at_scope[i] and code.strip() and
                code.rstrip().endswith((";", ",")) and
                not ACCESS.match(code)):
            column = len(code)
            indent = code
            block = [comment]
            j = i + 1
            while (j < n and lines[j].strip().startswith("//") and
                   len(lines[j]) - len(lines[j].lstrip()) == column):
                block.append(lines[j].lstrip())
                j += 1
            documented = document(block, "///<")
            out[i] = indent + documented[0].lstrip()
            for k in range(1, len(block)):
                out[i + k] = " " * column + documented[k].lstrip()
            i = j
            continue
        i += 1
    return out


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    sys.stdout.write("\n".join(filter_lines(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
