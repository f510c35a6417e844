//! Every way the egress proxy refuses, against real sockets on 127.0.0.1: endpoints outside
//! the allow list (403), requests that are not proxy requests (400), a head over the size
//! limit, each with the exact status, body and refusal report; and the allow-list table.

mod egress_support;

use std::sync::atomic::Ordering;

use egress_support::*;
use runplane::worker::egress::{AllowList, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn connect_outside_the_allow_list_gets_403_and_one_refusal() {
    let (echo, accepted) = echo().await;
    let port = echo.port();
    let allowed = vec![endpoint("127.0.0.1", port), endpoint("*.example.com", 443)];
    // (target, the refusal's host, its port)
    let cases = [
        (format!("127.0.0.1:{}", port + 1), "127.0.0.1", port + 1),
        // A name never admits by the address it resolves to.
        (format!("localhost:{port}"), "localhost", port),
        (format!("[::1]:{port}"), "::1", port),
        ("example.com:443".to_string(), "example.com", 443),
        ("a.example.com:80".to_string(), "a.example.com", 80),
        (
            "example.com.evil.net:443".to_string(),
            "example.com.evil.net",
            443,
        ),
    ];
    for (target, host, refused_port) in cases {
        let (proxy, mut refused) = proxy(allowed.clone()).await;
        let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        let response = exchange(&proxy, &request).await;
        assert_eq!(response.status_line, "HTTP/1.1 403 Forbidden", "{target}");
        let shown = match host {
            "::1" => format!("[::1]:{refused_port}"),
            _ => format!("{host}:{refused_port}"),
        };
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(
            String::from_utf8(response.body).unwrap(),
            format!("runplane egress proxy: {shown} is not in the run's egress allow list\n")
        );
        assert_eq!(
            refused.try_recv().unwrap(),
            refusal(
                host,
                refused_port,
                "CONNECT",
                "not in the run's egress allow list"
            )
        );
        assert!(refused.try_recv().is_err(), "one refusal for {target}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing reached upstream"
    );
}

#[tokio::test]
async fn requests_that_are_not_proxy_requests_get_400_and_a_refusal() {
    let (server, served) = upstream().await;
    let port = server.port();
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let not_proxy = "not a proxy request: the target must be an absolute http:// URL \
                     (or CONNECT host:port)";
    // (request head, the refusal: host, port, method, reason; None: hyper's own parse error)
    let cases: Vec<(String, Option<Refusal>)> = vec![
        (
            "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n".into(),
            Some(refusal("example.com", 0, "GET", not_proxy)),
        ),
        (
            "FOO /x HTTP/1.1\r\n\r\n".into(),
            Some(refusal("", 0, "FOO", not_proxy)),
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n".into(),
            Some(refusal("a", 0, "OPTIONS", not_proxy)),
        ),
        (
            "CONNECT localhost HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "localhost",
                0,
                "CONNECT",
                "CONNECT localhost has no port",
            )),
        ),
        (
            "GET https://127.0.0.1/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "127.0.0.1",
                443,
                "GET",
                "only http:// URLs are forwarded; https:// goes through CONNECT",
            )),
        ),
        (
            format!("GET http://user:pw@127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
            Some(refusal(
                "127.0.0.1",
                port,
                "GET",
                "credentials in the request's authority",
            )),
        ),
        (
            "GET http://2130706433/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "2130706433",
                0,
                "GET",
                "\"2130706433\" reads as a number, not a name or an address",
            )),
        ),
        (
            "GET http://127.1/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "127.1",
                0,
                "GET",
                "\"127.1\" reads as a number, not a name or an address",
            )),
        ),
        ("garbage\r\n\r\n".into(), None),
    ];
    for (head, expected) in cases {
        let response = exchange(&proxy, &head).await;
        assert_eq!(response.status_line, "HTTP/1.1 400 Bad Request", "{head:?}");
        let got = refused.try_recv().unwrap();
        match expected {
            Some(expected) => {
                assert_eq!(
                    String::from_utf8(response.body).unwrap(),
                    format!("runplane egress proxy: {}\n", expected.reason)
                );
                assert_eq!(got, expected, "{head:?}");
            }
            None => {
                assert_eq!(
                    (got.host.as_str(), got.port, got.method.as_str()),
                    ("", 0, "")
                );
                assert!(got.reason.starts_with("malformed request: "), "{got:?}");
            }
        }
        assert!(refused.try_recv().is_err(), "one refusal for {head:?}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_request_head_over_the_size_limit_is_refused_and_reported() {
    let (proxy, mut refused) = proxy(vec![]).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let head = format!(
        "GET http://example.com/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(512 * 1024)
    );
    // The proxy may close before reading it all; what matters is what it reports.
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer)).await;
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    let got = tokio::time::timeout(PATIENCE, refused.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.host.as_str(), got.port, got.method.as_str()),
        ("", 0, "")
    );
    assert!(got.reason.starts_with("malformed request: "), "{got:?}");
}

#[test]
fn the_allow_list_matches_names_globs_and_exact_addresses() {
    let list = AllowList::new(&[
        endpoint("*.example.com", 443),
        endpoint("api.Anthropic.com", 443),
        endpoint("10.0.0.1", 8080),
        endpoint("[::1]", 8443),
        endpoint("fd00::2", 8443),
        endpoint("crates.io.", 443),
    ])
    .unwrap();
    let cases = [
        ("a.example.com", 443, true),
        ("a.b.example.com", 443, true),
        ("A.Example.COM", 443, true),
        ("a.example.com.", 443, true),
        ("example.com", 443, false),
        ("example.com.evil.net", 443, false),
        ("evilexample.com", 443, false),
        ("a.example.com", 80, false),
        ("API.ANTHROPIC.COM", 443, true),
        ("api.anthropic.com.", 443, true),
        ("crates.io", 443, true),
        ("10.0.0.1", 8080, true),
        ("10.0.0.1.", 8080, true),
        ("10.0.0.1", 443, false),
        ("10.0.0.2", 8080, false),
        ("[::1]", 8443, true),
        ("[fd00::2]", 8443, true),
        ("[FD00:0::2]", 8443, true),
        ("[::2]", 8443, false),
        // A name never admits an address, whatever it resolves to, nor a glob one.
        ("93.184.215.14", 443, false),
        ("[::ffff:10.0.0.1]", 8080, false),
        // What a resolver would read as a number is no name.
        ("167772161", 8080, false),
        ("0xa000001", 8080, false),
        ("a..example.com", 443, false),
        (".example.com", 443, false),
        ("a.example.com/x", 443, false),
        ("", 443, false),
    ];
    for (host, port, admitted) in cases {
        assert_eq!(list.admits(host, port), admitted, "{host}:{port}");
    }
    assert!(AllowList::new(&[endpoint("[not-v6]", 1)]).is_err());
}
