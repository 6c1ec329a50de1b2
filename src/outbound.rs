//! Requests to URLs someone else supplied (customers' notification endpoints, SPEC §17): https
//! only, public addresses only — checked when the URL is registered and again at connect time —
//! no redirects, no proxies, a bounded answer.
//!
//! - [`check_url`] is the syntax check (scheme, host, no credentials, no non-public IP literal);
//!   [`check_endpoint`] adds resolution: every address the host resolves to must be public. Both
//!   run when an endpoint is registered.
//! - [`client`] is the client deliveries use: no redirects, no proxies, timeouts, and a resolver
//!   that drops every non-public address, so a name that later resolves to `127.0.0.1`,
//!   `10.0.0.1`, `169.254.169.254` or `::1` is refused at connect time (DNS rebinding).
//! - [`post`] sends one request: IP-literal hosts never reach a resolver, so it runs
//!   [`check_url`] first; it reads at most `max_body` bytes of the answer.
//!
//! `allow_insecure` (development and tests only) admits `http` and non-public addresses.

use std::error::Error as StdError;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::redirect::Policy;
use reqwest::Url;

/// Why a URL is refused. Display is a one-line human reason (no internal detail: never the
/// addresses a name resolved to).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("not a valid URL")]
    NotAUrl,
    #[error("the URL must use https")]
    NotHttps,
    #[error("the URL has no host")]
    NoHost,
    #[error("the URL must not contain a user name or password")]
    Credentials,
    /// The host (as written in the URL) is, or resolves to, an address that is not public.
    #[error("the host {0} is not on the public internet")]
    NonPublicAddress(String),
    #[error("the host {0} does not resolve")]
    DoesNotResolve(String),
}

/// Whether `ip` is a public unicast address.
///
/// IPv4: false for 0/8 (which includes unspecified), 10/8, 100.64/10 (CGNAT), 127/8, 169.254/16,
/// 172.16/12, 192.0.0/24, 192.0.2/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24,
/// 224/4 (multicast) and 240/4 (reserved, which includes broadcast).
///
/// IPv6: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, which covers `::` and
/// `::1`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) are judged by their embedded IPv4.
/// Otherwise only global unicast `2000::/3` can be public — which rules out unique-local
/// `fc00::/7`, link-local `fe80::/10`, site-local `fec0::/10`, multicast `ff00::/8`, discard
/// `100::/64` and the local-use NAT64 `64:ff9b:1::/48` — and within it the IETF protocol block
/// `2001::/23` (Teredo `2001::/32`, benchmarking `2001:2::/48`, ORCHID), documentation
/// `2001:db8::/32` and `3fff::/20` are not.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        // std's is_shared, is_benchmarking, is_reserved and is_global are unstable.
        || a == 0 // "this network"
        || (a == 100 && (b & 0b1100_0000) == 64) // 100.64/10, CGNAT
        || (a == 192 && b == 0 && c == 0) // 192.0.0/24, IETF protocol assignments
        || (a == 198 && (b & 0b1111_1110) == 18) // 198.18/15, benchmarking
        || a >= 240; // 240/4, reserved (and 255.255.255.255)
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // Loopback, unspecified, multicast, unique-local, link-local and site-local all lie outside
    // 2000::/3; they are named here as well so the intent reads plainly.
    if ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local()
    {
        return false;
    }
    let global_unicast = (s[0] & 0xe000) == 0x2000; // 2000::/3
    let ietf_protocol = s[0] == 0x2001 && s[1] < 0x0200; // 2001::/23: Teredo, benchmarking, ORCHID…
    let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] & 0xfff0) == 0x3ff0; // 2001:db8::/32, 3fff::/20
    global_unicast && !ietf_protocol && !documentation
}

/// The IPv4 address an IPv6 address carries and is to be judged by: IPv4-mapped
/// `::ffff:0:0/96`, IPv4-compatible `::/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0, 0, 0, 0, 0, 0] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

/// Syntax check of an endpoint URL: parses, scheme https (or http when `allow_insecure`), a
/// host, no user name or password. An IP-literal host that is not public is refused here unless
/// `allow_insecure` (the URL parser normalises `2130706433` and `0x7f.1` to `127.0.0.1`, so
/// those are literals too). Returns the parsed URL.
pub fn check_url(raw: &str, allow_insecure: bool) -> Result<Url, UrlRefusal> {
    let url = Url::parse(raw.trim()).map_err(|_| UrlRefusal::NotAUrl)?;
    match url.scheme() {
        "https" => {}
        "http" if allow_insecure => {}
        _ => return Err(UrlRefusal::NotHttps),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlRefusal::Credentials);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlRefusal::NoHost);
    }
    if let Some(ip) = literal_ip(&url) {
        if !allow_insecure && !is_public(ip) {
            return Err(UrlRefusal::NonPublicAddress(host_of(&url)));
        }
    }
    Ok(url)
}

/// [`check_url`], then resolves the host and refuses unless it resolves and (unless
/// `allow_insecure`) every address it resolves to is public — every, not any: a name with one
/// private address is refused. Used when an endpoint is registered; [`client`] checks again at
/// connect time.
pub async fn check_endpoint(raw: &str, allow_insecure: bool) -> Result<Url, UrlRefusal> {
    let url = check_url(raw, allow_insecure)?;
    let host = host_of(&url);
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs: Vec<SocketAddr> = match literal_ip(&url) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => {
            // Collected at once: the iterator borrows `host`.
            let looked_up: io::Result<Vec<SocketAddr>> =
                tokio::net::lookup_host((host.as_str(), port)).await.map(Iterator::collect);
            match looked_up {
                Ok(addrs) => addrs,
                Err(_) => return Err(UrlRefusal::DoesNotResolve(host)),
            }
        }
    };
    if addrs.is_empty() {
        return Err(UrlRefusal::DoesNotResolve(host));
    }
    if !allow_insecure && !addrs.iter().all(|a| is_public(a.ip())) {
        return Err(UrlRefusal::NonPublicAddress(host));
    }
    Ok(url)
}

/// The host when it is an IP literal. The parser has already normalised an https/http URL's
/// IPv4 forms (`2130706433`, `0x7f.1`) to dotted quads, and writes IPv6 in brackets.
fn literal_ip(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

/// The host as written in the URL (`[::1]` for IPv6), for messages.
fn host_of(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_owned()
}

/// The client deliveries use: rustls, no redirects, no proxies, the given connect and total
/// timeouts, and — unless `allow_insecure` — a resolver that drops every non-public address and
/// fails the lookup when none is left.
///
/// Panics only if the TLS backend cannot be initialised (a broken build, not a runtime input),
/// like `reqwest::Client::new`.
pub fn client(connect_timeout: Duration, request_timeout: Duration, allow_insecure: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .redirect(Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout);
    if !allow_insecure {
        builder = builder.dns_resolver(Arc::new(PublicOnlyResolver));
    }
    builder.build().expect("the outbound HTTP client builds (rustls, no custom certificates)")
}

/// Resolves with the system resolver (through tokio) and keeps only public addresses.
struct PublicOnlyResolver;

/// A lookup whose every address was non-public: the marker [`post`] looks for in an error's
/// source chain to answer [`SendError::Refused`] instead of `Unreachable`.
#[derive(Debug, thiserror::Error)]
#[error("the host resolves to no public address")]
struct NoPublicAddress;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: the connector puts in the URL's port (or the scheme's).
            let resolved = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = resolved.filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(Box::new(NoPublicAddress) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// What a POST came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// `Retry-After` in delta-seconds; an HTTP-date form is ignored (`None`).
    pub retry_after: Option<Duration>,
    /// At most `max_body` bytes of the body, lossy UTF-8.
    pub body: String,
}

/// Why a POST got no answer. Display is one line and never carries a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the endpoint did not answer in time")]
    Timeout,
    /// One line, e.g. "connection refused".
    #[error("the endpoint could not be reached: {0}")]
    Unreachable(String),
    /// A non-public address at connect time, or a [`check_url`] refusal.
    #[error("refused: {0}")]
    Refused(String),
}

/// POSTs `body` with `headers` and `Content-Type: application/json` to `url` and reads at most
/// `max_body` bytes of the answer.
///
/// [`check_url`] runs first (IP literals never reach the client's resolver, so they are checked
/// here) and its refusal is [`SendError::Refused`]; so is a name that resolves to no public
/// address at connect time (when `client` was built without `allow_insecure`). A timeout
/// (connect or total) is [`SendError::Timeout`]; everything else is [`SendError::Unreachable`].
/// Header values are marked sensitive and never appear in an error.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
    max_body: usize,
    allow_insecure: bool,
) -> Result<Answer, SendError> {
    let url = check_url(url, allow_insecure).map_err(|r| SendError::Refused(r.to_string()))?;
    let mut map = HeaderMap::with_capacity(headers.len() + 1);
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| SendError::Refused(format!("{} is not a valid header name", one_line(name))))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| SendError::Refused(format!("the value of header {name} is not a valid header value")))?;
        value.set_sensitive(true);
        map.insert(name, value);
    }

    let mut response = client.post(url).headers(map).body(body).send().await.map_err(classify)?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get(RETRY_AFTER).and_then(|v| retry_after_seconds(v.as_bytes()));

    let mut buf: Vec<u8> = Vec::with_capacity(max_body.min(64 * 1024));
    while buf.len() < max_body {
        match response.chunk().await.map_err(classify)? {
            Some(chunk) => {
                let room = max_body - buf.len();
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            None => break,
        }
    }
    // Dropping `response` here closes the connection on an answer longer than `max_body`.
    drop(response);
    Ok(Answer { status, retry_after, body: lossy_prefix(buf) })
}

/// `Retry-After` as delta-seconds. The HTTP-date form is ignored (`None`): no date parser is a
/// dependency of this crate, and the caller's own back-off then applies.
fn retry_after_seconds(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // More digits than fit in a u64 is "a very long time": saturate.
    Some(Duration::from_secs(text.parse::<u64>().unwrap_or(u64::MAX)))
}

/// Lossy UTF-8 of a body prefix, without the replacement character a cut through the last
/// character would leave.
fn lossy_prefix(mut buf: Vec<u8>) -> String {
    if let Err(e) = std::str::from_utf8(&buf) {
        if e.error_len().is_none() {
            // An incomplete sequence at the very end: where the cut fell.
            buf.truncate(e.valid_up_to());
        }
    }
    match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// A reqwest failure as a [`SendError`], in one line of our own words (never reqwest's Display,
/// which carries the URL).
fn classify(err: reqwest::Error) -> SendError {
    if err.is_timeout() {
        return SendError::Timeout;
    }
    if err.is_connect() && chain(&err).any(|e| e.is::<NoPublicAddress>()) {
        let host = err.url().and_then(|u| u.host_str()).unwrap_or("the host");
        return SendError::Refused(format!("{host} resolves to no public address"));
    }
    let what = if err.is_connect() {
        "connect"
    } else if err.is_body() || err.is_decode() {
        "reading the answer"
    } else {
        "request"
    };
    SendError::Unreachable(format!("{what}: {}", cause_of(&err)))
}

/// The error and its sources, outermost first.
fn chain<'a>(err: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |e: &&'a (dyn StdError + 'static)| (*e).source())
}

/// A short description of the innermost cause: fixed words for the common I/O failures, else
/// the innermost error's message on one line.
fn cause_of(err: &reqwest::Error) -> String {
    if let Some(io) = chain(err).find_map(|e| e.downcast_ref::<io::Error>()) {
        let words = match io.kind() {
            io::ErrorKind::ConnectionRefused => Some("connection refused"),
            io::ErrorKind::ConnectionReset => Some("connection reset"),
            io::ErrorKind::ConnectionAborted => Some("connection aborted"),
            io::ErrorKind::NotConnected => Some("not connected"),
            io::ErrorKind::AddrNotAvailable => Some("address not available"),
            io::ErrorKind::UnexpectedEof => Some("connection closed early"),
            io::ErrorKind::HostUnreachable => Some("host unreachable"),
            io::ErrorKind::NetworkUnreachable => Some("network unreachable"),
            _ => None,
        };
        if let Some(words) = words {
            return words.to_owned();
        }
    }
    let innermost = chain(err).last().map(|e| e.to_string()).unwrap_or_default();
    one_line(&innermost)
}

/// `text` on one line, at most 200 characters.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= 200 {
        flat
    } else {
        let mut cut: String = flat.chars().take(199).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn is_public_over_the_ranges() {
        let refused = [
            // IPv4
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            // IPv6
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
            "2001:db8::1",
            "3fff::1",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "100::1",
            "64:ff9b:1::1",
            // embedded IPv4 that is not public
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::10.1.2.3",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
        ];
        for s in refused {
            assert!(!is_public(ip(s)), "{s} must not be public");
        }
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "9.9.9.9",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.254",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for s in public {
            assert!(is_public(ip(s)), "{s} must be public");
        }
    }

    #[test]
    fn check_url_refuses_what_is_not_an_https_url_to_a_public_host() {
        assert_eq!(check_url("not a url", false), Err(UrlRefusal::NotAUrl));
        assert_eq!(check_url("/relative", false), Err(UrlRefusal::NotAUrl));
        assert_eq!(check_url("http://example.com/hook", false), Err(UrlRefusal::NotHttps));
        assert_eq!(check_url("ftp://example.com/hook", true), Err(UrlRefusal::NotHttps));
        assert_eq!(check_url("file:///etc/passwd", true), Err(UrlRefusal::NotHttps));
        assert_eq!(check_url("https://user:pw@example.com/", false), Err(UrlRefusal::Credentials));
        assert_eq!(check_url("https://user@example.com/", false), Err(UrlRefusal::Credentials));
        for (raw, host) in [
            ("https://127.0.0.1/x", "127.0.0.1"),
            ("https://[::1]/", "[::1]"),
            ("https://169.254.169.254/latest", "169.254.169.254"),
            ("https://10.0.0.1", "10.0.0.1"),
            ("https://2130706433/", "127.0.0.1"),
            ("https://0x7f.1/", "127.0.0.1"),
            ("https://[::ffff:127.0.0.1]/", "[::ffff:7f00:1]"),
            ("https://0.0.0.0:8443/", "0.0.0.0"),
        ] {
            assert_eq!(check_url(raw, false), Err(UrlRefusal::NonPublicAddress(host.into())), "{raw}");
            assert!(check_url(raw, true).is_ok(), "{raw} with allow_insecure");
        }
        let ok = check_url("https://hooks.example.com:8443/notify?x=1", false).unwrap();
        assert_eq!(ok.host_str(), Some("hooks.example.com"));
        assert!(check_url("https://8.8.8.8/", false).is_ok());
        assert!(check_url("http://example.com/hook", true).is_ok());
    }

    #[test]
    fn refusals_are_one_line() {
        for r in [
            UrlRefusal::NotAUrl,
            UrlRefusal::NotHttps,
            UrlRefusal::NoHost,
            UrlRefusal::Credentials,
            UrlRefusal::NonPublicAddress("x.example".into()),
            UrlRefusal::DoesNotResolve("x.example".into()),
        ] {
            let s = r.to_string();
            assert!(!s.is_empty() && !s.contains('\n'), "{s:?}");
        }
    }

    #[tokio::test]
    async fn check_endpoint_resolves_and_refuses_a_name_for_loopback() {
        // `localhost` resolves offline: a real run of the DNS path.
        assert_eq!(
            check_endpoint("https://localhost/", false).await,
            Err(UrlRefusal::NonPublicAddress("localhost".into()))
        );
        assert_eq!(
            check_endpoint("https://localhost:8443/hook", false).await,
            Err(UrlRefusal::NonPublicAddress("localhost".into()))
        );
        assert!(check_endpoint("https://localhost/", true).await.is_ok());
        assert!(check_endpoint("http://localhost:8080/", true).await.is_ok());
        // A public literal needs no lookup.
        assert!(check_endpoint("https://8.8.8.8/hook", false).await.is_ok());
        assert_eq!(
            check_endpoint("https://127.0.0.1/", false).await,
            Err(UrlRefusal::NonPublicAddress("127.0.0.1".into()))
        );
        // `.invalid` never resolves (RFC 6761).
        assert_eq!(
            check_endpoint("https://nowhere.invalid/", true).await,
            Err(UrlRefusal::DoesNotResolve("nowhere.invalid".into()))
        );
    }

    #[tokio::test]
    async fn the_resolver_drops_non_public_addresses() {
        let err = match PublicOnlyResolver.resolve("localhost".parse().unwrap()).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(err) => err,
        };
        assert!(err.is::<NoPublicAddress>());
    }

    fn insecure_client() -> reqwest::Client {
        client(Duration::from_secs(2), Duration::from_secs(5), true)
    }

    #[tokio::test]
    async fn post_reads_a_200_answer_and_sends_the_headers() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/hook"))
            .and(wiremock::matchers::header("content-type", "application/json"))
            .and(wiremock::matchers::header("x-signature", "t=1;v1=abc"))
            .and(wiremock::matchers::body_string("{\"a\":1}"))
            .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
            .expect(1)
            .mount(&server)
            .await;
        let answer = post(
            &insecure_client(),
            &format!("{}/hook", server.uri()),
            &[("X-Signature", "t=1;v1=abc".into())],
            b"{\"a\":1}".to_vec(),
            1024,
            true,
        )
        .await
        .unwrap();
        assert_eq!(answer, Answer { status: 200, retry_after: None, body: "ok".into() });
    }

    #[tokio::test]
    async fn post_reads_retry_after_seconds() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "7"))
            .mount(&server)
            .await;
        let answer = post(&insecure_client(), &server.uri(), &[], b"{}".to_vec(), 1024, true).await.unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(answer.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn retry_after_is_delta_seconds_only() {
        assert_eq!(retry_after_seconds(b"120"), Some(Duration::from_secs(120)));
        assert_eq!(retry_after_seconds(b" 0 "), Some(Duration::ZERO));
        assert_eq!(retry_after_seconds(b"Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after_seconds(b"-5"), None);
        assert_eq!(retry_after_seconds(b""), None);
        assert_eq!(retry_after_seconds(b"99999999999999999999999"), Some(Duration::from_secs(u64::MAX)));
    }

    #[tokio::test]
    async fn post_does_not_follow_redirects() {
        let server = MockServer::start().await;
        Mock::given(path("/start"))
            .respond_with(
                ResponseTemplate::new(302).insert_header("Location", format!("{}/target", server.uri()).as_str()),
            )
            .mount(&server)
            .await;
        Mock::given(path("/target")).respond_with(ResponseTemplate::new(200)).expect(0).mount(&server).await;
        let answer = post(&insecure_client(), &format!("{}/start", server.uri()), &[], b"{}".to_vec(), 1024, true)
            .await
            .unwrap();
        assert_eq!(answer.status, 302);
        let received = server.received_requests().await.unwrap();
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].url.path(), "/start");
    }

    #[tokio::test]
    async fn post_cuts_a_huge_body_at_max_body() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![b'a'; 1024 * 1024]))
            .mount(&server)
            .await;
        let answer = post(&insecure_client(), &server.uri(), &[], b"{}".to_vec(), 1000, true).await.unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.len(), 1000);
        let none = post(&insecure_client(), &server.uri(), &[], b"{}".to_vec(), 0, true).await.unwrap();
        assert_eq!(none.body, "");
    }

    #[test]
    fn a_cut_through_a_character_leaves_no_replacement() {
        let mut bytes = "abé".as_bytes().to_vec();
        bytes.pop(); // half of é
        assert_eq!(lossy_prefix(bytes), "ab");
        assert_eq!(lossy_prefix(vec![b'a', 0xff, b'b']), "a\u{fffd}b");
    }

    #[tokio::test]
    async fn post_times_out_on_a_slow_answer() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(3)))
            .mount(&server)
            .await;
        let slow = client(Duration::from_secs(2), Duration::from_millis(300), true);
        let started = std::time::Instant::now();
        let err = post(&slow, &server.uri(), &[], b"{}".to_vec(), 1024, true).await.unwrap_err();
        assert_eq!(err, SendError::Timeout);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn post_to_a_closed_port_is_unreachable_and_says_so_without_secrets() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let secret = "sk_live_very_secret_value";
        let err = post(
            &insecure_client(),
            &format!("http://127.0.0.1:{port}/hook"),
            &[("Authorization", format!("Bearer {secret}"))],
            b"{}".to_vec(),
            1024,
            true,
        )
        .await
        .unwrap_err();
        assert_eq!(err, SendError::Unreachable("connect: connection refused".into()));
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret) && !shown.contains('\n'), "{shown}");
    }

    #[tokio::test]
    async fn post_refuses_a_literal_non_public_address_before_sending() {
        let server = MockServer::start().await;
        let port = server.address().port();
        let err = post(&insecure_client(), &format!("https://127.0.0.1:{port}/"), &[], b"{}".to_vec(), 1024, false)
            .await
            .unwrap_err();
        assert_eq!(err, SendError::Refused(UrlRefusal::NonPublicAddress("127.0.0.1".into()).to_string()));
        let err = post(&insecure_client(), &server.uri(), &[], b"{}".to_vec(), 1024, false).await.unwrap_err();
        assert_eq!(err, SendError::Refused(UrlRefusal::NotHttps.to_string()));
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn post_refuses_a_name_that_resolves_to_loopback_at_connect_time() {
        let server = MockServer::start().await;
        Mock::given(method("POST")).respond_with(ResponseTemplate::new(200)).expect(0).mount(&server).await;
        let port = server.address().port();
        let strict = client(Duration::from_secs(2), Duration::from_secs(5), false);
        // `localhost` passes the syntax check (a name); the resolver drops 127.0.0.1 and ::1.
        let err = post(&strict, &format!("https://localhost:{port}/hook"), &[], b"{}".to_vec(), 1024, false)
            .await
            .unwrap_err();
        assert_eq!(err, SendError::Refused("localhost resolves to no public address".into()));
        assert!(server.received_requests().await.unwrap().is_empty());
    }

    #[test]
    fn send_errors_are_one_line() {
        for e in [
            SendError::Timeout,
            SendError::Unreachable("connect: connection refused".into()),
            SendError::Refused("x".into()),
        ] {
            assert!(!e.to_string().contains('\n'));
        }
        assert_eq!(one_line("a\nb\r\n  c"), "a b c");
        assert_eq!(one_line(&"x".repeat(500)).chars().count(), 200);
    }
}
