//! The guard of the dashboard's actions against cross-site requests.
//!
//! A page on another site can make a visitor's browser send a POST here (a form, or a `fetch`
//! in `no-cors` mode), with the visitor's cookies and network position: a dashboard on
//! 127.0.0.1 or behind a VPN is reachable that way. Such a request cannot carry a header of its
//! own choosing without the browser first asking this server's permission (a CORS preflight,
//! which nothing here grants), and the browser says where it comes from. So an action must:
//! - carry [`ACTION_HEADER`], which no form and no `no-cors` request can send;
//! - come from this page: `Sec-Fetch-Site: same-origin` when the browser sends that header (every
//!   current one does); otherwise an `Origin` whose host and port are the request's `Host`;
//!   a request with neither is refused, so a script outside a browser sends `Origin` itself.
//!
//! Anything else is refused with `403 Forbidden` before the body is read.

use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;

/// The header every action must carry (any value): `X-Timewheel-Action`.
pub(super) const ACTION_HEADER: &str = "x-timewheel-action";

/// Why an action was refused, for its `403` answer.
pub(super) fn refuse_cross_site(headers: &HeaderMap) -> Option<&'static str> {
    if !headers.contains_key(ACTION_HEADER) {
        return Some("an action must carry the X-Timewheel-Action header (the dashboard's page sends it)");
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        return (site.as_bytes() != b"same-origin").then_some("an action must come from the dashboard's own page");
    }
    let (Some(origin), Some(host)) = (headers.get(ORIGIN), headers.get(HOST)) else {
        return Some("an action must come from a browser on the dashboard's page, or carry Origin and Host");
    };
    let same = origin
        .to_str()
        .ok()
        .and_then(|o| o.strip_prefix("http://").or_else(|| o.strip_prefix("https://")))
        .zip(host.to_str().ok())
        .is_some_and(|(origin_host, host)| origin_host.eq_ignore_ascii_case(host));
    (!same).then_some("an action must come from the dashboard's own origin")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_same_origin_requests_with_the_header_pass() {
        let allowed: &[&[(&str, &str)]] = &[
            &[(ACTION_HEADER, "1"), ("sec-fetch-site", "same-origin")],
            &[(ACTION_HEADER, "1"), ("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1"), ("origin", "https://Timers.Example"), ("host", "timers.example")],
            // The browser's word wins over an Origin a proxy may have rewritten.
            &[(ACTION_HEADER, "1"), ("sec-fetch-site", "same-origin"), ("origin", "http://a"), ("host", "b")],
        ];
        for pairs in allowed {
            assert_eq!(refuse_cross_site(&headers(pairs)), None, "{pairs:?}");
        }
        let refused: &[&[(&str, &str)]] = &[
            &[],
            &[("sec-fetch-site", "same-origin")],
            &[("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1")],
            &[(ACTION_HEADER, "1"), ("sec-fetch-site", "cross-site")],
            &[(ACTION_HEADER, "1"), ("sec-fetch-site", "same-site")],
            &[(ACTION_HEADER, "1"), ("sec-fetch-site", "none")],
            &[(ACTION_HEADER, "1"), ("origin", "http://evil.example"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1"), ("origin", "null"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1"), ("origin", "http://127.0.0.1:8081"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1"), ("origin", "http://127.0.0.1:8080.evil"), ("host", "127.0.0.1:8080")],
            &[(ACTION_HEADER, "1"), ("host", "127.0.0.1:8080")],
        ];
        for pairs in refused {
            assert!(refuse_cross_site(&headers(pairs)).is_some(), "{pairs:?}");
        }
    }
}
