//! The file's names and patterns as the layer's targets: one reading for every key that names
//! tools, prompts or resources, so that a pattern means the same in a `[[gate]]`, in
//! `[upstream] expose` and `hide`, and in `--explain`.
//!
//! A tool or prompt pattern is a name glob (`delete_*`; `*` any run of characters, `?` one);
//! a resource pattern is a URI, or a URI pattern when it has `*` or `?` (`file:///srv/**`). The
//! matching is the layer's own ([`GateTarget::applies_to`]): a pattern the file holds matches
//! exactly what a gate of it would. Where one list names all three kinds (`expose`, `hide`,
//! `--explain`), an entry is a tool bare, a prompt as `prompt:NAME`, a resource as
//! `resource:URI`.

use tower_elicitation::GateTarget;

/// The method whose calls a target of `kind` (`tool`, `prompt` or `resource`) matches.
pub fn method_of(kind: &str) -> &'static str {
    match kind {
        "tool" => "tools/call",
        "prompt" => "prompts/get",
        _ => "resources/read",
    }
}

/// The kind an entry of a list naming all three kinds is, and the pattern after its prefix:
/// `prompt:NAME` a prompt, `resource:URI` a resource, anything else a tool.
pub fn split(entry: &str) -> (&'static str, &str) {
    match entry.split_once(':') {
        Some(("prompt", name)) => ("prompt", name),
        Some(("resource", uri)) => ("resource", uri),
        _ => ("tool", entry),
    }
}

/// `pattern` as the target of `kind`: a name glob for a tool or a prompt; for a resource a URI
/// pattern when it has `*` or `?`, else the URI (however a call spells it).
///
/// # Errors
///
/// What the pattern's syntax refuses, naming the kind (`tool pattern "delete_[ab]": …`).
pub fn target(kind: &str, pattern: &str) -> Result<GateTarget, String> {
    match kind {
        "tool" => GateTarget::tool_glob(pattern),
        "prompt" => GateTarget::prompt_glob(pattern),
        _ if pattern.contains(['*', '?']) => GateTarget::resource_pattern(pattern),
        _ => Ok(GateTarget::resource(pattern.to_owned())),
    }
    .map_err(|error| format!("{kind} {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_tool_unless_its_prefix_names_a_prompt_or_a_resource() {
        assert_eq!(split("read_*"), ("tool", "read_*"));
        assert_eq!(split("prompt:echo"), ("prompt", "echo"));
        assert_eq!(
            split("resource:file:///srv/**"),
            ("resource", "file:///srv/**")
        );
        assert_eq!(split("ns:tool"), ("tool", "ns:tool"));
    }

    #[test]
    fn patterns_match_as_the_layers_gates_do() {
        let tools = target("tool", "read_*").unwrap();
        assert!(tools.applies_to(method_of("tool"), "read_file"));
        assert!(!tools.applies_to(method_of("prompt"), "read_file"));
        let uris = target("resource", "file:///srv/secret/**").unwrap();
        assert!(uris.applies_to(method_of("resource"), "file:///srv/./secret/a/b"));
        let uri = target("resource", "file:///srv/a.txt").unwrap();
        assert!(uri.applies_to(method_of("resource"), "FILE:///srv/a.txt"));
        let error = target("tool", "read_[ab]").unwrap_err();
        assert!(error.starts_with("tool pattern \"read_[ab]\""), "{error}");
        assert!(target("prompt", "").is_err());
    }
}
