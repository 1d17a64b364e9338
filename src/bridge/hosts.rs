//! Which names the bridge answers to: the `Host` and `Origin` check against DNS rebinding.
//!
//! A page on another site can make a browser send requests to a server on the person's own
//! machine, under the page's own name (DNS rebinding), or under the machine's name with the
//! page's `Origin`. The bridge is the 2025-era server (it answers `initialize` and holds the
//! sessions), so it checks both before anything else: the `Host` (or the URI's authority) and, when
//! a browser sent one, the `Origin`'s host must be one of the allowed names. By default those are
//! the loopback names (`localhost`, `127.0.0.1`, `::1`, on any port), as rmcp's and the
//! TypeScript SDK's servers allow. A deployment reached under other names lists them
//! ([`LegacyBridgeLayer::allowed_hosts`](super::LegacyBridgeLayer::allowed_hosts)), or turns the
//! check off when something in front does it
//! ([`allow_any_host`](super::LegacyBridgeLayer::allow_any_host)).
//!
//! Hand-written: tower-http has no such layer, and rmcp's check lives inside its own service.
//! Names are parsed with `http::uri::Authority`; nothing here allocates unless a list was given.

use http::header::{HOST, ORIGIN};
use http::request::Parts;
use http::uri::Authority;

/// The names a request may be addressed to, or `None` for any.
#[derive(Clone, Debug)]
pub(crate) struct AllowedHosts(Option<Vec<Allowed>>);

/// One allowed name: a host, lowercase and without brackets, and the port it must come with, if
/// the entry named one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Allowed {
    host: String,
    port: Option<u16>,
}

impl Default for AllowedHosts {
    fn default() -> Self {
        Self::list(["localhost", "127.0.0.1", "::1"])
    }
}

impl AllowedHosts {
    /// Any name: no check.
    pub(crate) fn any() -> Self {
        Self(None)
    }

    /// The names of `hosts`: `example.com` (any port), `example.com:8443`, `[::1]:3000`. An entry
    /// that is no host at all is kept as it is written, and matches only that name.
    pub(crate) fn list<I, S>(hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let hosts = hosts
            .into_iter()
            .map(|entry| {
                let entry = entry.as_ref().trim();
                match Authority::try_from(entry) {
                    Ok(authority) => Allowed {
                        host: normalized(authority.host()),
                        port: authority.port_u16(),
                    },
                    // `::1` is no authority (it would need brackets), but it is a host.
                    Err(_) => Allowed {
                        host: normalized(entry),
                        port: None,
                    },
                }
            })
            .collect();
        Self(Some(hosts))
    }

    /// Why a request with this head is refused, if it is: its `Host` or its `Origin` names a host
    /// that is not allowed, or cannot be read. A request with neither (one built in process) is
    /// let through: every browser sends a `Host`.
    pub(crate) fn refusal(&self, parts: &Parts) -> Option<&'static str> {
        let allowed = self.0.as_deref()?;
        let host = match parts.headers.get(HOST) {
            Some(value) => value
                .to_str()
                .ok()
                .and_then(|v| Authority::try_from(v).ok()),
            None => parts.uri.authority().cloned(),
        };
        if parts.headers.contains_key(HOST) || host.is_some() {
            match &host {
                Some(host) if matches(allowed, host) => {}
                _ => {
                    return Some(
                        "Forbidden: the Host header names a host this server does not serve",
                    );
                }
            }
        }
        if let Some(origin) = parts.headers.get(ORIGIN) {
            let authority = origin
                .to_str()
                .ok()
                .and_then(|v| v.parse::<http::Uri>().ok())
                .and_then(|uri| uri.authority().cloned());
            match authority {
                Some(origin) if matches(allowed, &origin) => {}
                _ => {
                    return Some(
                        "Forbidden: the Origin header names a site this server does not serve",
                    );
                }
            }
        }
        None
    }
}

fn matches(allowed: &[Allowed], authority: &Authority) -> bool {
    let host = authority.host();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    allowed.iter().any(|entry| {
        entry.host.eq_ignore_ascii_case(host)
            && entry
                .port
                .is_none_or(|port| authority.port_u16() == Some(port))
    })
}

fn normalized(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method("POST").uri("/mcp");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn loopback_names_are_served_by_default_on_any_port() {
        let hosts = AllowedHosts::default();
        for host in ["localhost", "127.0.0.1:3000", "[::1]:8080", "LOCALHOST:1"] {
            assert_eq!(hosts.refusal(&head(&[("host", host)])), None, "{host}");
        }
        let local = head(&[
            ("host", "127.0.0.1:3000"),
            ("origin", "http://localhost:6274"),
        ]);
        assert_eq!(hosts.refusal(&local), None);
    }

    #[test]
    fn another_name_or_origin_is_refused_by_default() {
        let hosts = AllowedHosts::default();
        for headers in [
            &[
                ("host", "evil.example.com"),
                ("origin", "http://evil.example.com"),
            ][..],
            &[("host", "evil.example.com")],
            &[
                ("host", "127.0.0.1:3000"),
                ("origin", "http://evil.example.com"),
            ],
            &[("host", "127.0.0.1:3000"), ("origin", "null")],
            &[("host", "not a host")],
            &[("host", "localhost.evil.example.com")],
        ] {
            assert!(hosts.refusal(&head(headers)).is_some(), "{headers:?}");
        }
    }

    #[test]
    fn a_list_replaces_the_default_and_a_port_in_it_is_required() {
        let hosts = AllowedHosts::list(["mcp.example.com:8443", "[::1]"]);
        assert_eq!(
            hosts.refusal(&head(&[("host", "mcp.example.com:8443")])),
            None
        );
        assert_eq!(hosts.refusal(&head(&[("host", "[::1]:9")])), None);
        assert!(
            hosts
                .refusal(&head(&[("host", "mcp.example.com")]))
                .is_some()
        );
        assert!(hosts.refusal(&head(&[("host", "localhost")])).is_some());
    }

    #[test]
    fn any_host_and_a_request_without_one_are_let_through() {
        let evil = head(&[
            ("host", "evil.example.com"),
            ("origin", "http://evil.example.com"),
        ]);
        assert_eq!(AllowedHosts::any().refusal(&evil), None);
        assert_eq!(AllowedHosts::default().refusal(&head(&[])), None);
    }
}
