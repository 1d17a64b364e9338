#!/usr/bin/env python3
"""Checks the module graph of every crate in the repository: no cycles, and no wing importing
another wing. Exits 1 on either.

The crates are the library (`src/lib.rs`), the proxy (`proxy/src/main.rs`) and each of the
tools' binaries (`tools/src/bin/*.rs`, with their modules in `tools/src/bin/<name>/`).

A module imports another when its text names an item through a path into it: a `use` of
`crate::a::b`, `super::b` or `self::b`, or such a path written inline (`crate::a::b::f()`); in a
crate root, a bare path into one of its own modules (`config::load()`) too. A path is resolved to
the deepest module it names that exists (`crate::engine::outbound::relation` is the module
`engine::outbound`; `crate::engine::Round` is `engine`). A parent module that re-exports its
children (`pub(crate) use child::Item`) imports them like any other module, so a child that names
an item of its parent (`super::Round`) is in a cycle with it whenever the parent re-exports that
child. Test modules (`#[cfg(test)] mod tests { … }` at the end of a file) are left out: they may
use anything.

A library's root (`lib.rs`) re-exports everything, so naming it says nothing about the layering:
it is left out of the library's graph, as is `fuzz_api` (the `__fuzz` door into the internals for
the fuzz targets and the tests). A binary's root (`main.rs`) is a module like the others: a module
that imports `crate::Error` from it while it calls into that module is a cycle.

The library's wings are the middlewares (`WINGS`): each may import the floors below it (every
other module), never another wing. ARCHITECTURE.md says which module is which.

    python3 scripts/module_cycles.py          # every crate: cycles and wing imports, or "no cycles"
    python3 scripts/module_cycles.py src      # one crate, by its folder (src, proxy/src, tools/src)

Standard library only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The library's middlewares. A module of one may not import a module of another.
WINGS = ("bridge", "elicitation", "upstream")

# Modules of the library that may import anything: the `__fuzz` door into the internals (the file
# `fuzz_api.rs`, named `__fuzz` by `lib.rs`'s `#[path]`).
UNLAYERED = ("fuzz_api", "__fuzz")


@dataclass
class Crate:
    """A crate's root file and the folder its modules live in."""

    name: str
    root: Path
    base: Path
    library: bool


def crates(folders: list[str]) -> list[Crate]:
    found: list[Crate] = []
    for folder in folders:
        path = (ROOT / folder).resolve()
        if (path / "lib.rs").exists():
            found.append(Crate(folder, path / "lib.rs", path, library=True))
        if (path / "main.rs").exists():
            found.append(Crate(folder, path / "main.rs", path, library=False))
        bins = path / "bin"
        for root in sorted(bins.glob("*.rs")) if bins.is_dir() else []:
            found.append(
                Crate(f"{folder}/bin/{root.stem}", root, bins / root.stem, library=False)
            )
        if not (path / "lib.rs").exists() and not (path / "main.rs").exists() and not bins.is_dir():
            sys.exit(f"module_cycles: {folder} holds no lib.rs, main.rs or bin/")
    return found


def module_of(crate: Crate, path: Path) -> str:
    if path == crate.root:
        return ""
    parts = list(path.relative_to(crate.base).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return "::".join(parts)


def modules(crate: Crate) -> dict[str, Path]:
    if crate.base == crate.root.parent:
        # `lib.rs` or `main.rs`: every file of the folder but the binaries in `bin/`.
        files = [p for p in crate.base.rglob("*.rs") if p.relative_to(crate.base).parts[0] != "bin"]
    else:
        # `bin/<name>.rs`, with its modules in `bin/<name>/`.
        files = [crate.root] + (list(crate.base.rglob("*.rs")) if crate.base.is_dir() else [])
    found = {module_of(crate, p): p for p in files}
    # `#[path = "…"]` modules: the file's own name is not its module name.
    text = crate.root.read_text()
    for attr, name in re.findall(
        r'#\[path = "([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))? )?mod (\w+);', text
    ):
        path = (crate.root.parent / attr).resolve()
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
BARE = re.compile(r"(?<![\w:])([a-z_]\w*)((?:::\w+)+)")
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
    plain = USE_GROUP.sub("", text)
    for head, tail in PATH.findall(plain):
        paths.append((head, tail.strip(":").split("::")))
    if module == "":
        # A crate root names its own modules without `crate::`.
        for head, tail in BARE.findall(plain):
            if head in known and head not in ("crate", "super", "self"):
                paths.append(("crate", [head] + tail.strip(":").split("::")))
    found = set()
    for head, rest in paths:
        target = resolve(module, head, rest, known)
        if target is not None:
            found.add(target)
    found.discard(module)
    return found


def graph_of(crate: Crate) -> dict[str, set[str]]:
    mods = modules(crate)
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
        graph[name] = deps
    if crate.library:
        for left_out in ("",) + UNLAYERED:
            graph.pop(left_out, None)
        for deps in graph.values():
            deps.discard("")
            deps.difference_update(UNLAYERED)
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def wing(module: str) -> str | None:
    top = module.split("::")[0]
    return top if top in WINGS else None


def wing_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [
        (module, dep)
        for module, deps in sorted(graph.items())
        for dep in sorted(deps)
        if wing(module) and wing(dep) and wing(module) != wing(dep)
    ]


def show(module: str) -> str:
    return module or "(root)"


def main() -> int:
    folders = sys.argv[1:] or ["src", "proxy/src", "tools/src"]
    failed = False
    for crate in crates(folders):
        graph = graph_of(crate)
        cycles = cycles_of(graph)
        crossings = wing_imports(graph) if crate.library else []
        for cycle in cycles:
            print(f"{crate.name}: cycle: " + " -> ".join(map(show, cycle)))
        for module, dep in crossings:
            print(f"{crate.name}: wing imports wing: {module} -> {dep}")
        if cycles or crossings:
            failed = True
            print(
                f"module_cycles: {crate.name}: {len(cycles)} cycles, {len(crossings)} wing-to-wing "
                f"imports among {len(graph)} modules"
            )
        else:
            wings = " and no wing imports another" if crate.library else ""
            print(f"module_cycles: {crate.name}: no cycles among {len(graph)} modules{wings}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
