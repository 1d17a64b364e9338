//! The MCP form subset of JSON Schema: checking a `requestedSchema` and validating answers to it.
//!
//! An MCP form elicitation (`ElicitRequestFormParams`) carries a `requestedSchema` that must stay
//! inside a small, flat subset of JSON Schema: an object whose properties are strings, numbers,
//! integers, booleans, single-select enums and multi-select enums of strings. `check` tells
//! whether a schema is inside that subset and, if not, where and why it leaves it.
//!
//! Answers are validated against the full JSON Schema semantics of the `requestedSchema` (with
//! `format` asserted), through compiled validators cached per distinct schema; a schema outside
//! the subset is still validated, with a warning logged once when it is first compiled.

pub(crate) mod schema;
pub(crate) mod validate;

pub use schema::FormSchemaError;
pub(crate) use schema::check;
