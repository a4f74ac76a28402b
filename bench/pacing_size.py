"""The size of the pacing and retrying code, against the budget issue 52 set for it.

Counts, over every module of ``orbench/llm/`` whose name says ratelimit, pacer, pacing, retry,
limit_headers or reachability (the pacer, ``ratelimit.py``, and the retry rule, ``retry.py``);
the client's loop that carries the rule out (``Client._send`` and the module functions of
``orbench/llm/clients.py`` it uses) is listed beside them, not counted (issue 45 counted it):

- code lines: lines holding code, as Python's tokenizer and AST see them (docstrings, comments
  and blank lines apart; a statement over several lines counts each of them);
- named numeric tunables: module-level names bound to a number (or to arithmetic on numbers,
  such as ``1 / 8``), each listed with its value. Names of flags' defaults (``DEFAULT_*``) are
  listed apart: they are the user's settings, not the pacer's.

The budget: at most 300 code lines and at most 8 named numeric tunables.

    python bench/pacing_size.py
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLM = ROOT / "orbench" / "llm"
NAMES = re.compile(r"ratelimit|pacer|pacing|retry|limit_headers|reachability")
CLIENT = LLM / "clients.py"
LOOP = "_send"
BUDGET_LINES, BUDGET_TUNABLES = 300, 8
# Read providers' headers and bodies: provider knowledge, shown for the record, not counted.
PROVIDER_PARTS = {LLM / "providers" / "transport.py": ("seconds_until", "budgets", "retry_after"),
                  LLM / "providers" / "gemini.py": ("retry_delay",)}
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENDMARKER, tokenize.ENCODING}


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the module's, classes' and functions' docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.update(range(body[0].lineno, body[0].end_lineno + 1))
    return found


def code_lines(source: str, within: tuple[int, int] | None = None) -> int:
    """Lines of ``source`` (or of its lines ``within``, inclusive) that hold a code token."""
    skip = docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _SKIP:
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in skip and (within is None or within[0] <= line <= within[1]):
                lines.add(line)
    return len(lines)


def numeric(node: ast.AST) -> bool:
    """A number, or arithmetic on numbers only."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return numeric(node.left) and numeric(node.right)
    if isinstance(node, ast.UnaryOp):
        return numeric(node.operand)
    if isinstance(node, ast.Tuple):
        return all(numeric(e) for e in node.elts)
    return False


def constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to numbers, with their values as written."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and numeric(node.value):
            targets = node.targets[0]
            names = [t.id for t in (targets.elts if isinstance(targets, ast.Tuple) else [targets])]
            values = node.value.elts if isinstance(node.value, ast.Tuple) and len(names) > 1 else [node.value]
            for name, value in zip(names, values):
                found[name] = ast.unparse(value)
    return found


def used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def measure() -> tuple[list[tuple[str, int]], dict[str, str], dict[str, str], list[tuple[str, int]]]:
    """``([(part, code lines)], tunables, flag defaults, [(the client's loop, code lines)])``."""
    parts, tunables, defaults, apart = [], {}, {}, []
    for path in sorted(LLM.rglob("*.py")):
        if NAMES.search(path.stem):
            source = path.read_text()
            parts.append((str(path.relative_to(ROOT)), code_lines(source)))
            tunables.update(constants(ast.parse(source)))
    source = CLIENT.read_text()
    tree = ast.parse(source)
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == LOOP)
    helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    reached, todo = {}, [loop]
    while todo:  # the loop, and the module functions it calls, and theirs
        node = todo.pop()
        for name in used_names(node) & helpers.keys() - reached.keys():
            reached[name] = helpers[name]
            todo.append(helpers[name])
    for node in [loop, *reached.values()]:
        label = f"{CLIENT.relative_to(ROOT)}: {node.name}"
        apart.append((label, code_lines(source, (node.lineno, node.end_lineno))))
    names = set().union(*(used_names(n) for n in [loop, *reached.values()]))
    for name, value in constants(tree).items():
        if name in names:
            tunables[name] = value
    for name in [n for n in tunables if n.startswith("DEFAULT_")]:
        defaults[name] = tunables.pop(name)
    return parts, tunables, defaults, apart


def main() -> int:
    parts, tunables, defaults, apart = measure()
    total = sum(lines for _, lines in parts)
    for label, lines in parts:
        print(f"{lines:5d}  {label}")
    print(f"{total:5d}  code lines in all (budget {BUDGET_LINES})")
    for label, lines in apart:
        print(f"       not counted: {lines} lines of {label} (the loop that carries the rule out)")
    print(f"{len(tunables):5d}  named numeric tunables (budget {BUDGET_TUNABLES}): "
          + ", ".join(f"{k} = {v}" for k, v in tunables.items()))
    if defaults:
        print("       flags' defaults, apart: " + ", ".join(f"{k} = {v}" for k, v in defaults.items()))
    for path, names in PROVIDER_PARTS.items():
        source = path.read_text()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                lines = code_lines(source, (node.lineno, node.end_lineno))
                print(f"       not counted: {lines} lines of {path.relative_to(ROOT)}: {node.name} "
                      f"(the providers' header and body formats)")
    within = total <= BUDGET_LINES and len(tunables) <= BUDGET_TUNABLES
    print("within the budget" if within else "OVER the budget")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
