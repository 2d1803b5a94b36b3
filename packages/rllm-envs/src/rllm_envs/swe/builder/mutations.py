"""Procedural bugs in the spirit of SWE-smith: one small edit inside a real library function.

Operators (each a pure function from a parsed module to candidate edits):

==================  ==============================================================
flip_comparison     ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``in`` ↔ ``not in``,
                    ``is`` ↔ ``is not``
flip_boolean        ``and`` ↔ ``or``
flip_arithmetic     ``+`` ↔ ``-`` (also ``+=`` ↔ ``-=``)
off_by_one          an integer literal one higher (or lower)
remove_branch       an ``if`` statement without ``else`` deleted
negate_condition    ``if x:`` → ``if not (x):``, ``if not x:`` → ``if x:``
swap_arguments      the first two positional arguments of a call swapped
change_default      a parameter's default: ``True`` ↔ ``False``, an integer ±1
==================  ==============================================================

Edits are made on the source bytes at the AST's positions, so the rest of the file keeps its
formatting to the byte; a mutant must still parse. The gold patch is the diff from the mutant
back to the original file (git's format, applied with ``git apply``).
"""

from __future__ import annotations

import ast
import difflib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rllm_envs.swe.builder.projects import Project


@dataclass(frozen=True)
class Edit:
    start: int  # byte offsets in the file
    end: int
    replacement: bytes


@dataclass(frozen=True)
class Mutation:
    path: str  # relative to the repository root
    function: str  # qualified name inside its module, e.g. "Version.bump_major"
    module: str  # dotted module name, e.g. "semver.version"
    operator: str
    line: int
    original: str
    mutated: str

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.operator}"


@dataclass(frozen=True)
class _Source:
    data: bytes
    line_starts: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> _Source:
        data = text.encode()
        starts = [0]
        for index, byte in enumerate(data):
            if byte == 0x0A:
                starts.append(index + 1)
        return cls(data, tuple(starts))

    def offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def text(self, node: ast.AST) -> bytes:
        return self.data[self.start(node) : self.end(node)]


# -- operators ------------------------------------------------------------------------------
_COMPARISON_SWAPS: dict[type, tuple[bytes, bytes]] = {
    ast.Lt: (rb"<(?!=)", b"<="),
    ast.LtE: (rb"<=", b"<"),
    ast.Gt: (rb">(?!=)", b">="),
    ast.GtE: (rb">=", b">"),
    ast.Eq: (rb"==", b"!="),
    ast.NotEq: (rb"!=", b"=="),
    ast.In: (rb"(?<![\w])in(?![\w])", b"not in"),
    ast.NotIn: (rb"not\s+in", b"in"),
    ast.Is: (rb"(?<![\w])is(?![\w])", b"is not"),
    ast.IsNot: (rb"is\s+not", b"is"),
}


def _between(source: _Source, left: ast.AST, right: ast.AST, pattern: bytes, new: bytes):
    """An edit replacing the operator `pattern` found between two nodes (outside comments)."""
    start, end = source.end(left), source.start(right)
    segment = source.data[start:end]
    if b"#" in segment:
        return None
    match = re.search(pattern, segment)
    if match is None:
        return None
    return Edit(start + match.start(), start + match.end(), new)


def flip_comparison(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        pattern, new = _COMPARISON_SWAPS[type(node.ops[0])]
        edit = _between(source, node.left, node.comparators[0], pattern, new)
        if edit:
            yield edit


def flip_boolean(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if isinstance(node, ast.BoolOp) and len(node.values) == 2:
        old, new = (b"and", b"or") if isinstance(node.op, ast.And) else (b"or", b"and")
        edit = _between(source, node.values[0], node.values[1], rb"\b" + old + rb"\b", new)
        if edit:
            yield edit


def flip_arithmetic(source: _Source, node: ast.AST) -> Iterator[Edit]:
    swaps = {ast.Add: (rb"\+", b"-"), ast.Sub: (rb"-", b"+")}
    if isinstance(node, ast.BinOp) and type(node.op) in swaps:
        pattern, new = swaps[type(node.op)]
        edit = _between(source, node.left, node.right, pattern, new)
        if edit:
            yield edit
    elif isinstance(node, ast.AugAssign) and type(node.op) in swaps:
        pattern, new = swaps[type(node.op)]
        edit = _between(source, node.target, node.value, pattern + rb"=", new + b"=")
        if edit:
            yield edit


def _int_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and type(node.value) is int
        and 0 <= node.value <= 1000
        and node.lineno == node.end_lineno
    )


def off_by_one(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if _int_literal(node):
        for value in (node.value + 1, node.value - 1):
            if value >= 0:
                yield Edit(source.start(node), source.end(node), str(value).encode())


def _owns_lines(source: _Source, node: ast.stmt) -> bool:
    """Whether the statement alone occupies its lines (nothing before it, a comment after)."""
    line_start = source.line_starts[node.lineno - 1]
    if source.data[line_start : source.start(node)].strip():
        return False
    end = source.end(node)
    line_end = source.data.find(b"\n", end)
    tail = source.data[end : line_end if line_end >= 0 else len(source.data)].strip()
    return not tail or tail.startswith(b"#")


def _remove_statement(source: _Source, node: ast.stmt, siblings: list[ast.stmt]) -> Edit | None:
    if not _owns_lines(source, node):
        return None
    start = source.line_starts[node.lineno - 1]
    line_end = source.data.find(b"\n", source.end(node))
    end = len(source.data) if line_end < 0 else line_end + 1
    if len(siblings) == 1:
        indent = source.data[start : source.start(node)]
        return Edit(start, end, indent + b"pass\n")
    return Edit(start, end, b"")


def remove_branch(source: _Source, node: ast.AST) -> Iterator[Edit]:
    for body in (getattr(node, "body", None), getattr(node, "orelse", None)):
        if not isinstance(body, list):
            continue
        for statement in body:
            if isinstance(statement, ast.If) and not statement.orelse:
                edit = _remove_statement(source, statement, body)
                if edit:
                    yield edit


def negate_condition(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if not isinstance(node, ast.If) or node.test.lineno != node.test.end_lineno:
        return
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield Edit(source.start(test), source.end(test), source.text(test.operand))
    else:
        yield Edit(source.start(test), source.end(test), b"not (" + source.text(test) + b")")


def swap_arguments(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return
    first, second = node.args[0], node.args[1]
    if any(isinstance(arg, ast.Starred) for arg in (first, second)):
        return
    if first.lineno != second.end_lineno:
        return
    first_text, second_text = source.text(first), source.text(second)
    if first_text == second_text:
        return
    middle = source.data[source.end(first) : source.start(second)]
    yield Edit(source.start(first), source.end(second), second_text + middle + first_text)


def change_default(source: _Source, node: ast.AST) -> Iterator[Edit]:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
        if isinstance(default, ast.Constant) and isinstance(default.value, bool):
            yield Edit(source.start(default), source.end(default), str(not default.value).encode())
        elif _int_literal(default):
            yield Edit(source.start(default), source.end(default), str(default.value + 1).encode())


OPERATORS: dict[str, Callable[[_Source, ast.AST], Iterator[Edit]]] = {
    "flip_comparison": flip_comparison,
    "flip_boolean": flip_boolean,
    "flip_arithmetic": flip_arithmetic,
    "off_by_one": off_by_one,
    "remove_branch": remove_branch,
    "negate_condition": negate_condition,
    "swap_arguments": swap_arguments,
    "change_default": change_default,
}


# -- finding candidates ---------------------------------------------------------------------
def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, def node) for every function and method, nested ones included."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")

    yield from visit(tree, "")


def _nodes_of(function: ast.AST) -> Iterator[ast.AST]:
    """The function's own nodes (not those of functions defined inside it), itself first."""
    yield function
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _docstring_lines(function: ast.AST) -> range:
    body = getattr(function, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return range(body[0].lineno, body[0].end_lineno + 1)
    return range(0)


def module_mutations(path: str, module: str, text: str) -> list[Mutation]:
    """Every candidate mutation of one module's functions that still parses."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    source = _Source.of(text)
    found: dict[bytes, Mutation] = {}
    for name, function in _functions(tree):
        if name.split(".")[-1] in ("__repr__", "__str__"):
            continue
        docstring = _docstring_lines(function)
        for node in _nodes_of(function):
            if getattr(node, "lineno", 0) in docstring and node is not function:
                continue
            for operator, make in OPERATORS.items():
                for edit in make(source, node):
                    data = source.data[: edit.start] + edit.replacement + source.data[edit.end :]
                    if data == source.data or data in found:
                        continue
                    mutated = data.decode()
                    try:
                        ast.parse(mutated)
                    except SyntaxError:
                        continue
                    line = source.data.count(b"\n", 0, edit.start) + 1
                    found[data] = Mutation(path, name, module, operator, line, text, mutated)
    return list(found.values())


def project_modules(project: Project, tree: Path) -> Iterator[tuple[str, str]]:
    """(path in the tree, dotted module name) of the library files mutations may touch."""
    for entry in project.packages:
        root = tree / entry
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for file in files:
            relative = file.relative_to(tree).as_posix()
            if any(
                relative == skip or relative.startswith(skip + "/") for skip in project.skip_modules
            ):
                continue
            parts = relative.split("/")
            if any(part in ("tests", "test") or part.startswith("test_") for part in parts):
                continue
            module_path = relative.removeprefix(f"{project.import_root}/").removesuffix(".py")
            module = module_path.removesuffix("/__init__").replace("/", ".")
            yield relative, module


def candidates(project: Project, tree: Path, seed: int) -> list[Mutation]:
    """All candidates of a project, in a seeded order that spreads over functions: the first
    round takes one mutation of every function (in shuffled order), the next round a second..."""
    by_function: dict[tuple[str, str], list[Mutation]] = {}
    for relative, module in project_modules(project, tree):
        text = (tree / relative).read_text(encoding="utf-8")
        if not text.endswith("\n"):
            continue
        for mutation in module_mutations(relative, module, text):
            by_function.setdefault((relative, mutation.function), []).append(mutation)
    generator = random.Random(f"{project.repo}:{seed}")
    groups = list(by_function.values())
    generator.shuffle(groups)
    for group in groups:
        generator.shuffle(group)
    ordered = []
    for round_index in range(max((len(group) for group in groups), default=0)):
        ordered.extend(group[round_index] for group in groups if round_index < len(group))
    return ordered


def file_diff(path: str, old: str, new: str) -> str:
    """A one-file diff in git's format (what ``git apply`` reads)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def gold_patch(mutation: Mutation) -> str:
    """The diff that fixes the mutant (mutated → original)."""
    return file_diff(mutation.path, mutation.mutated, mutation.original)
