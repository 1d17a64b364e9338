#!/usr/bin/env python3
"""Lists import cycles between the modules of `src/`: exits 1 when there is one.

A module imports another when its text names an item through a path into it: a `use` of
`crate::a::b`, `super::b` or `self::b`, or such a path written inline (`crate::a::b::f()`). A path
is resolved to the deepest module it names that exists (`crate::engine::outbound::relation` is
the module `engine::outbound`; `crate::engine::Round` is `engine`). A parent module that
re-exports its children (`pub(crate) use child::Item`) imports them like any other module, so a
child that names an item of its parent (`super::Round`) is in a cycle with it whenever the
parent re-exports that child. Test modules (`#[cfg(test)] mod tests { … }` at the end of a file)
are left out: they may use anything.

    python3 scripts/module_cycles.py          # prints the graph's cycles, or "no cycles"

Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_of(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return "::".join(parts)


def modules() -> dict[str, Path]:
    found = {module_of(p): p for p in SRC.rglob("*.rs")}
    # `#[path = "…"]` modules: the file's own name is not its module name.
    lib = (SRC / "lib.rs").read_text()
    for attr, name in re.findall(r'#\[path = "([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*pub(?:\([^)]*\))? mod (\w+);', lib):
        path = (SRC / attr).resolve()
        for key, value in list(found.items()):
            if value.resolve() == path:
                del found[key]
        found[name] = path
    return found


def strip_tests(text: str) -> str:
    at = text.find("#[cfg(test)]\nmod tests")
    return text if at < 0 else text[:at]


def strip_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
USE_GROUP = re.compile(r"\buse\s+((?:crate|super|self)(?:::\w+)*)::\{([^;]*)\};", re.S)


def resolve(module: str, head: str, rest: list[str], known: set[str]) -> str | None:
    if head == "crate":
        base: list[str] = []
    else:
        base = module.split("::") if module else []
        if head == "super":
            base = base[:-1]
    target = None
    parts = list(base)
    if "::".join(parts) in known or not parts:
        target = "::".join(parts)
    for part in rest:
        parts.append(part)
        name = "::".join(parts)
        if name in known:
            target = name
        else:
            break
    return target


def imports(module: str, text: str, known: set[str]) -> set[str]:
    paths: list[tuple[str, list[str]]] = []
    for prefix, group in USE_GROUP.findall(text):
        head, *rest = prefix.split("::")
        # Nested groups first (`a::{b::{c, d}}`), then the plain items.
        for inner_prefix, inner in re.findall(r"(\w+(?:::\w+)*)::\{([^}]*)\}", group):
            for item in re.split(r"[,\s]+", inner):
                if item.strip():
                    paths.append((head, rest + inner_prefix.split("::") + [item.strip()]))
        for item in re.split(r",", re.sub(r"\w+(?:::\w+)*::\{[^}]*\}", "", group)):
            item = item.strip().split(" as ")[0].strip()
            if item == "self":
                paths.append((head, rest))
            elif item:
                paths.append((head, rest + item.split("::")))
    for head, tail in PATH.findall(USE_GROUP.sub("", text)):
        paths.append((head, tail.strip(":").split("::")))
    found = set()
    for head, rest in paths:
        target = resolve(module, head, rest, known)
        # The crate root re-exports everything: naming it says nothing about the layering.
        if target:
            found.add(target)
    found.discard(module)
    return found


def main() -> int:
    mods = modules()
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        text = strip_comments(strip_tests(path.read_text()))
        deps = imports(name, text, known)
        # A parent imports the children it re-exports.
        for child in re.findall(r"\bpub(?:\([^)]*\))?\s+use\s+(\w+)::", text):
            full = f"{name}::{child}" if name else child
            if full in known:
                deps.add(full)
        deps.discard(name)
        deps.discard("")
        graph[name] = deps

    cycles: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()

    def walk(start: str, node: str, stack: list[str]) -> None:
        for dep in sorted(graph.get(node, ())):
            if dep == start:
                cycle = stack + [start]
                key = tuple(sorted(set(cycle)))
                if key not in seen:
                    seen.add(key)
                    cycles.append(cycle)
            elif dep not in stack and dep > start:
                walk(start, dep, stack + [dep])

    for start in sorted(graph):
        walk(start, start, [start])
    if not cycles:
        print(f"module_cycles: no cycles among {len(graph)} modules")
        return 0
    for cycle in cycles:
        print("cycle: " + " -> ".join(cycle))
    print(f"module_cycles: {len(cycles)} cycles among {len(graph)} modules")
    return 1


if __name__ == "__main__":
    sys.exit(main())
