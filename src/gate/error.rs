//! Why a gate could not be declared: [`GateError`].

use std::fmt;

use crate::form::FormSchemaError;

/// Why a gate could not be declared.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// A gate key is empty.
    EmptyKey,
    /// A form gate's schema is outside the MCP form subset; the [`FormSchemaError`] (also its
    /// [`source`](std::error::Error::source)) says where and why.
    Schema {
        /// The gate.
        key: String,
        /// Where and why.
        error: FormSchemaError,
    },
    /// A form gate's schema, given as text, is not one JSON value, or repeats a key.
    SchemaText {
        /// The gate.
        key: String,
        /// What is wrong with the text.
        reason: String,
    },
    /// A form gate's schema is inside the subset, but the validator cannot compile it (a `$ref`
    /// that does not resolve, say).
    SchemaCompile {
        /// The gate.
        key: String,
        /// What the validator said.
        reason: String,
    },
    /// Two gates that can apply to the same call share a key.
    DuplicateKey(String),
    /// A glob or resource pattern the matcher cannot honour as written.
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyKey => f.write_str("a gate key must not be empty"),
            Self::Schema { key, error } => {
                let path = if error.path.is_empty() {
                    "/"
                } else {
                    &error.path
                };
                write!(
                    f,
                    "gate `{key}`: its form schema is outside the MCP form subset at {path}"
                )
            }
            Self::SchemaText { key, reason } => {
                write!(f, "gate `{key}`: its form schema is not JSON: {reason}")
            }
            Self::SchemaCompile { key, reason } => {
                write!(
                    f,
                    "gate `{key}`: its form schema cannot be compiled: {reason}"
                )
            }
            Self::DuplicateKey(key) => write!(
                f,
                "two gates that can apply to the same call share the key `{key}`"
            ),
            Self::Pattern { reason, .. } => write!(f, "pattern {reason}"),
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Schema { error, .. } => Some(error),
            _ => None,
        }
    }
}
