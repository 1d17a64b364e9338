#!/usr/bin/env python3
"""Checks that the declared MSRV is one number, held everywhere it is read.

Only one toolchain can be installed on the machines this project builds on, so the MSRV cannot be
proven by building with Rust 1.88 itself. What can be checked, and is:

- `rust-version` in Cargo.toml and `msrv` in clippy.toml agree (clippy's `incompatible_msrv`
  lint, which `cargo clippy -D warnings` runs, then refuses any std API newer than it);
- no package the library can build with (every feature, normal dependencies) declares a
  `rust-version` newer than ours.

Exits 1, naming what disagrees, when either fails.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def version(text: str) -> tuple[int, int, int]:
    """`1.88` and `1.88.0` are the same version."""
    parts = [int(part) for part in text.split(".")] + [0, 0]
    return (parts[0], parts[1], parts[2])


def declared(path: pathlib.Path, key: str) -> str:
    match = re.search(rf'^{key}\s*=\s*"([0-9.]+)"', path.read_text(), re.MULTILINE)
    if not match:
        sys.exit(f"msrv: no {key} in {path.name}")
    return match.group(1)


def main() -> int:
    ours = declared(ROOT / "Cargo.toml", "rust-version")
    clippy = declared(ROOT / "clippy.toml", "msrv")
    failures = []
    if version(ours) != version(clippy):
        failures.append(f"Cargo.toml says rust-version {ours}, clippy.toml says msrv {clippy}")

    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--all-features"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {package["id"]: package for package in metadata["packages"]}
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    root = next(p["id"] for p in metadata["packages"] if p["name"] == "tower-elicitation")

    # The library's own dependency graph: normal dependencies only (dev and build kinds aside).
    seen, stack = set(), [root]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for dep in nodes[current]["deps"]:
            if any(kind["kind"] is None for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    for package_id in sorted(seen - {root}):
        package = packages[package_id]
        theirs = package.get("rust_version")
        if theirs and version(theirs) > version(ours):
            failures.append(
                f"{package['name']} {package['version']} needs Rust {theirs}, newer than {ours}"
            )

    for failure in failures:
        print(f"msrv: {failure}", file=sys.stderr)
    if not failures:
        print(f"msrv: {ours} in Cargo.toml and clippy.toml; none of {len(seen) - 1} dependencies needs newer")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
