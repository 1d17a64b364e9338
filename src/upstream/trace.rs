//! The W3C trace context of one call (`traceparent`, and `tracestate` with it): read from the
//! front's request, sent on the HTTP upstream's request of that call only.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// `traceparent`: the trace and the caller's span ([W3C Trace Context](https://www.w3.org/TR/trace-context/)).
pub(crate) const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// `tracestate`: vendors' own entries, which go only with a valid `traceparent`.
pub(crate) const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
/// The longest `tracestate` passed on (the length the spec asks every vendor to pass on);
/// a longer one is dropped, the `traceparent` kept.
const MAX_TRACESTATE: usize = 512;

/// The trace context a front's request carried, for the upstream's request of its call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceContext {
    traceparent: HeaderValue,
    tracestate: Option<HeaderValue>,
}

impl TraceContext {
    /// The context in `headers`: `None` without exactly one valid `traceparent`.
    pub(crate) fn of(headers: &HeaderMap) -> Option<Self> {
        let mut parents = headers.get_all(TRACEPARENT).iter();
        let traceparent = parents.next()?;
        if parents.next().is_some() || !valid_traceparent(traceparent.as_bytes()) {
            return None;
        }
        // Several `tracestate` fields are one list, in order.
        let mut state = Vec::new();
        for value in headers.get_all(TRACESTATE) {
            if !state.is_empty() {
                state.push(b',');
            }
            state.extend_from_slice(value.as_bytes());
        }
        let tracestate = (!state.is_empty() && state.len() <= MAX_TRACESTATE)
            .then(|| HeaderValue::from_bytes(&state).ok())
            .flatten();
        Some(Self {
            traceparent: traceparent.clone(),
            tracestate,
        })
    }

    /// The headers the upstream's request carries.
    #[cfg_attr(not(feature = "upstream-http"), allow(dead_code))]
    pub(crate) fn headers(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        std::iter::once((TRACEPARENT, self.traceparent.clone())).chain(
            self.tracestate
                .iter()
                .map(|state| (TRACESTATE, state.clone())),
        )
    }
}

/// Whether `value` is a `traceparent` as W3C Trace Context level 1 reads it:
/// `version-traceid-parentid-flags` in lowercase hex, version not `ff`, neither id all zeros;
/// a later version may add `-…` after the flags.
fn valid_traceparent(value: &[u8]) -> bool {
    let hex = |part: &[u8]| {
        part.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let nonzero = |part: &[u8]| part.iter().any(|&b| b != b'0');
    if value.len() < 55 || (value.len() > 55 && value[55] != b'-') {
        return false;
    }
    let (version, trace, parent, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    let dashes = value[2] == b'-' && value[35] == b'-' && value[52] == b'-';
    dashes
        && hex(version)
        && version != b"ff"
        && (version != b"00" || value.len() == 55)
        && hex(trace)
        && nonzero(trace)
        && hex(parent)
        && nonzero(parent)
        && hex(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn a_valid_traceparent_is_taken_with_its_tracestate() {
        let context =
            TraceContext::of(&headers(&[("traceparent", PARENT), ("tracestate", "a=1")])).unwrap();
        let sent: Vec<_> = context.headers().collect();
        assert_eq!(
            sent,
            [
                (TRACEPARENT, HeaderValue::from_static(PARENT)),
                (TRACESTATE, HeaderValue::from_static("a=1"))
            ]
        );
        // Several `tracestate` fields are one list.
        let joined = TraceContext::of(&headers(&[
            ("traceparent", PARENT),
            ("tracestate", "a=1"),
            ("tracestate", "b=2"),
        ]))
        .unwrap();
        assert_eq!(joined.tracestate, Some(HeaderValue::from_static("a=1,b=2")));
        // A later version may say more after the flags.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(TraceContext::of(&headers(&[("traceparent", later)])).is_some());
    }

    #[test]
    fn a_traceparent_that_is_not_one_is_dropped_with_its_tracestate() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let found = TraceContext::of(&headers(&[("traceparent", bad), ("tracestate", "a=1")]));
            assert_eq!(found, None, "{bad:?}");
        }
        // Two `traceparent` fields: which one is the caller's cannot be told.
        let two = headers(&[("traceparent", PARENT), ("traceparent", PARENT)]);
        assert_eq!(TraceContext::of(&two), None);
        assert_eq!(TraceContext::of(&HeaderMap::new()), None);
    }

    #[test]
    fn a_tracestate_over_the_bound_is_dropped_and_the_traceparent_kept() {
        let long = "a=".to_owned() + &"x".repeat(MAX_TRACESTATE);
        let context =
            TraceContext::of(&headers(&[("traceparent", PARENT), ("tracestate", &long)])).unwrap();
        assert_eq!(context.tracestate, None);
        assert_eq!(context.headers().count(), 1);
    }
}
