#!/usr/bin/env python3
"""Fails when the public API names a type or trait of a crate that is not on the allow-list.

The check `cargo check-external-types` makes, on the stable toolchain this machine has: rustdoc's
JSON output (`RUSTC_BOOTSTRAP=1 … --output-format json`, all features) lists every public item;
every path an item's signature, fields, variants, bounds or impls name is looked up, and a path
into another crate must be on `ALLOWED`. Blanket impls (`impl<T> Any for T`) and auto-trait impls
(`Send`, and the `Unpin` that `pin_project!` writes) are not the crate's API and are skipped.

    python3 scripts/external_types.py           # builds the JSON, prints what it found; exit 1 on a new type

Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The ecosystem's vocabulary: crates whose types a Tower HTTP middleware may hand to its users.
ALLOWED_CRATES = {"std", "core", "alloc", "http", "http_body", "bytes", "tower_layer", "tower_service"}
# Single items of other crates, allowed one by one.
ALLOWED_ITEMS = {
    "serde_json::value::Value",
    "serde_json::map::Map",
    # `#[derive(Serialize, Deserialize)]` on records a shared store keeps as text (serde's traits
    # live in `serde_core` since serde 1.0.220).
    "serde_core::ser::Serialize",
    "serde_core::ser::Serializer",
    "serde_core::de::Deserialize",
    "serde_core::de::Deserializer",
    "serde_core::de::DeserializeOwned",
    "schemars::JsonSchema",
}
# Auto traits: their impls are the compiler's (or `pin_project!`'s `Unpin`), not API a user calls.
AUTO_TRAITS = {"Send", "Sync", "Unpin", "UnwindSafe", "RefUnwindSafe", "Freeze"}


def build() -> dict:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    env = dict(os.environ, RUSTC_BOOTSTRAP="1", RUSTDOCFLAGS="")
    subprocess.run(
        ["cargo", "rustdoc", "--lib", "--all-features", "--quiet", "--",
         "-Z", "unstable-options", "--output-format", "json"],
        cwd=ROOT, env=env, check=True,
    )
    return json.loads((target / "doc" / "tower_elicitation.json").read_text())


def paths_in(value, found: list[int]) -> None:
    """Every item id a `Path` (`{"path", "id", "args"}`) inside `value` points at."""
    if isinstance(value, dict):
        if isinstance(value.get("id"), int) and "path" in value:
            found.append(value["id"])
        for child in value.values():
            paths_in(child, found)
    elif isinstance(value, list):
        for child in value:
            paths_in(child, found)


def main() -> int:
    doc = build()
    index, paths, crates = doc["index"], doc["paths"], doc["external_crates"]
    uses: dict[str, set[str]] = {}
    for item in index.values():
        if item.get("crate_id") != 0:
            continue
        inner = item.get("inner", {})
        impl = inner.get("impl")
        if impl and (impl.get("synthetic") or impl.get("blanket_impl") is not None):
            continue
        if impl and (impl.get("trait") or {}).get("path") in AUTO_TRAITS:
            continue
        found: list[int] = []
        paths_in(inner, found)
        where = item.get("name") or (impl and impl.get("for", {}).get("resolved_path", {}).get("path")) or "impl"
        for target in found:
            summary = paths.get(str(target))
            if not summary or summary["crate_id"] == 0:
                continue
            crate = crates[str(summary["crate_id"])]["name"]
            name = "::".join(summary["path"])
            if crate in ALLOWED_CRATES or name in ALLOWED_ITEMS:
                continue
            uses.setdefault(name, set()).add(where)
    if not uses:
        print("no external types outside the allow-list in the public API")
        return 0
    print("external types in the public API that are not on the allow-list:")
    for name in sorted(uses):
        print(f"  {name}  (in {', '.join(sorted(uses[name]))})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
