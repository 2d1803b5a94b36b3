"""Runs inside the agent's SWE container: the file tools (view, str_replace, create, search).

The host sends this file and one call (JSON on stdin: ``{"tool", "arguments", "workdir",
"max_chars"}``) through the sandbox server; it runs as the sandbox user, so it can change only
what the agent could change with bash. The reply is JSON: ``{"ok": bool, "output": str}``.
Standard library only.
"""

import json
import os
import sys

MAX_SEARCH_MATCHES = 100
MAX_LISTING_ENTRIES = 400
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox", "node_modules"}


class ToolError(Exception):
    pass


def resolve(workdir, path):
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty string")
    return os.path.normpath(os.path.join(workdir, path.strip()))


def shown(workdir, path):
    relative = os.path.relpath(path, workdir)
    return path if relative.startswith("..") else relative


def read_text(path):
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\0" in data[:8192]:
        raise ToolError(f"{path} is a binary file")
    return data.decode("utf-8", "replace")


def numbered(lines, first):
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{number:>{width}}\t{line}" for number, line in enumerate(lines, first))


def view(workdir, arguments):
    path = resolve(workdir, arguments.get("path"))
    if os.path.isdir(path):
        entries = []
        for root, dirs, files in os.walk(path):
            subdirs = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
            # Two levels: the folder's entries and theirs.
            dirs[:] = subdirs if root == path else []
            for name in subdirs:
                entries.append(shown(workdir, os.path.join(root, name)) + "/")
            for name in sorted(files):
                entries.append(shown(workdir, os.path.join(root, name)))
            if len(entries) >= MAX_LISTING_ENTRIES:
                return "\n".join(sorted(entries)[:MAX_LISTING_ENTRIES]) + "\n[... listing cut ...]"
        return "\n".join(sorted(entries)) or "(empty directory)"
    if not os.path.exists(path):
        raise ToolError(f"{shown(workdir, path)} does not exist")
    lines = read_text(path).splitlines()
    start = arguments.get("start_line") or 1
    end = arguments.get("end_line") or len(lines)
    if end == -1:
        end = len(lines)
    if not (isinstance(start, int) and isinstance(end, int)) or start < 1 or end < start:
        raise ToolError("start_line and end_line must be line numbers with start <= end")
    if lines and start > len(lines):
        raise ToolError(f"the file has only {len(lines)} lines")
    return numbered(lines[start - 1 : end], start) if lines else "(empty file)"


def str_replace(workdir, arguments):
    path = resolve(workdir, arguments.get("path"))
    old, new = arguments.get("old_str"), arguments.get("new_str", "")
    if not isinstance(old, str) or not old:
        raise ToolError("old_str must be a non-empty string")
    if not isinstance(new, str):
        raise ToolError("new_str must be a string")
    if not os.path.isfile(path):
        raise ToolError(f"{shown(workdir, path)} is not a file")
    text = read_text(path)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"old_str was not found in {shown(workdir, path)}; nothing changed")
    if count > 1:
        raise ToolError(
            f"old_str occurs {count} times in {shown(workdir, path)}; "
            "include more context so that it is unique; nothing changed"
        )
    before = text[: text.index(old)]
    text = before + new + text[len(before) + len(old) :]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    first = before.count("\n") + 1
    lines = text.splitlines()
    low, high = max(1, first - 3), min(len(lines), first + new.count("\n") + 3)
    return f"Edited {shown(workdir, path)}. Lines {low}-{high} now read:\n" + numbered(
        lines[low - 1 : high], low
    )


def create(workdir, arguments):
    path = resolve(workdir, arguments.get("path"))
    content = arguments.get("content", "")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    if os.path.exists(path):
        raise ToolError(
            f"{shown(workdir, path)} already exists; edit it with str_replace (or bash)"
        )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
    return f"Created {shown(workdir, path)} ({len(content.splitlines())} lines)."


def search(workdir, arguments):
    pattern = arguments.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("pattern must be a non-empty string")
    root = resolve(workdir, arguments.get("path") or ".")
    files = [root] if os.path.isfile(root) else []
    if not files:
        if not os.path.isdir(root):
            raise ToolError(f"{shown(workdir, root)} does not exist")
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            files.extend(os.path.join(folder, name) for name in sorted(names))
    matches = []
    for path in files:
        try:
            text = read_text(path)
        except (ToolError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern in line:
                matches.append(f"{shown(workdir, path)}:{number}: {line.strip()[:200]}")
                if len(matches) >= MAX_SEARCH_MATCHES:
                    return "\n".join(matches) + f"\n[... stopped at {MAX_SEARCH_MATCHES} matches]"
    return "\n".join(matches) or f"No matches for {pattern!r}."


TOOLS = {"view": view, "str_replace": str_replace, "create": create, "search": search}


def main():
    call = json.loads(sys.stdin.read())
    try:
        output = TOOLS[call["tool"]](os.path.normpath(call["workdir"]), call["arguments"])
        reply = {"ok": True, "output": output}
    except ToolError as error:
        reply = {"ok": False, "output": str(error)}
    except OSError as error:
        reply = {"ok": False, "output": f"{type(error).__name__}: {error.strerror or error}"}
    sys.stdout.write(json.dumps(reply))


if __name__ == "__main__":
    main()
