//! The `ElicitationLayer` wing: the HTTP adapter around the engine, in tower-http's shape.
//!
//! [`layer`] builds the options, [`service`] is the `Service` impl, [`future`] drives one request,
//! [`pipeline`] is the path of an MRTR call (the probe, the inner call, the framing of the
//! layer's own replies), [`body`] and [`sse_body`] are the bodies it hands on.

pub(crate) mod body;
pub(crate) mod framing;
pub(crate) mod future;
pub(crate) mod layer;
pub(crate) mod pipeline;
pub(crate) mod service;
pub(crate) mod shared;
pub(crate) mod sse_body;
pub(crate) mod task_path;
