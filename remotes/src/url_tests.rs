use super::*;

fn policy(hosts: &[&str], ports: &[u16]) -> UrlPolicy {
    let hosts: Vec<String> = hosts.iter().map(|host| (*host).to_owned()).collect();
    UrlPolicy::new(&hosts, ports).expect("policy")
}

#[test]
fn urls_under_the_default_policy() {
    let default = UrlPolicy::default();
    // (url, Ok(normal form) or Err(words the reason contains))
    let cases: &[(&str, Result<&str, &str>)] = &[
        ("https://dr.example.com", Ok("https://dr.example.com")),
        ("https://DR.Example.COM/", Ok("https://dr.example.com")),
        ("https://dr.example.com:443", Ok("https://dr.example.com")),
        (
            "https://dr.example.com/narad/",
            Ok("https://dr.example.com/narad"),
        ),
        ("https://10.1.2.3", Ok("https://10.1.2.3")),
        ("https://[2001:db8::1]", Ok("https://[2001:db8::1]")),
        ("http://dr.example.com", Err("must use https")),
        ("ftp://dr.example.com", Err("https:// URL")),
        ("dr.example.com", Err("https:// URL")),
        (
            "https://dr.example.com:8443",
            Err("port 8443 is not in remotes.allowed_ports"),
        ),
        ("https://user:pw@dr.example.com", Err("userinfo")),
        ("https://dr.example.com/?a=1", Err("query")),
        ("https://dr.example.com/#top", Err("fragment")),
        ("https://dr.example.com.", Err("not a host name")),
        ("https://dr_x.example.com", Err("not a host name")),
        ("https://-dr.example.com", Err("not a host name")),
        ("https://dr.example.com:", Err("empty port")),
        ("https://", Err("not a URL")),
        ("", Err("not a URL")),
    ];
    for (url, expected) in cases {
        let got = parse_url(url, &default);
        match expected {
            Ok(normal) => assert_eq!(got.map(|url| url.text).as_deref(), Ok(*normal), "{url}"),
            Err(words) => {
                let error = got.expect_err(url);
                assert_eq!(error.field, "url", "{url}");
                assert!(error.reason.contains(words), "{url}: {}", error.reason);
            }
        }
    }
}

#[test]
fn a_url_over_2048_bytes_is_refused() {
    let host = "https://dr.example.com/";
    let fits = format!("{host}{}", "a".repeat(URL_BYTES_MAX - host.len()));
    assert!(parse_url(&fits, &UrlPolicy::default()).is_ok());
    let over = format!("{fits}a");
    let error = parse_url(&over, &UrlPolicy::default()).expect_err("too long");
    assert!(error.reason.contains("2048"));
}

#[test]
fn the_parts_of_a_url_are_kept() {
    let url = parse_url("https://DR.example.com:8443/p/", &policy(&[], &[443, 8443])).expect("url");
    assert_eq!(
        url,
        RemoteUrl {
            text: "https://dr.example.com:8443/p".into(),
            host: "dr.example.com".into(),
            port: 8443,
            path: "/p".into(),
        }
    );
}

#[test]
fn hosts_against_the_allowlist() {
    let allow = policy(
        &["dr.example.com", "*.backup.example.net", "10.0.0.9"],
        &[443],
    );
    let cases = [
        ("https://dr.example.com", true),
        ("https://other.example.com", false),
        ("https://a.backup.example.net", true),
        ("https://a.b.backup.example.net", true),
        ("https://backup.example.net", false),
        ("https://evilbackup.example.net", false),
        ("https://10.0.0.9", true),
        ("https://10.0.0.10", false),
    ];
    for (url, allowed) in cases {
        let got = parse_url(url, &allow);
        assert_eq!(got.is_ok(), allowed, "{url}: {got:?}");
        if let Err(error) = got {
            assert!(error.reason.contains("remotes.allowed_hosts"), "{url}");
        }
    }
}

#[test]
fn a_refusal_by_the_nodes_ports_or_allowlist_says_which_and_a_malformed_url_names_none() {
    let allow = policy(&["dr.example.com"], &[443]);
    let refusal = |url: &str| parse_url(url, &allow).expect_err(url).refusal;
    assert_eq!(
        refusal("https://dr.example.com:8443"),
        Some(DestinationRefusal::Port)
    );
    assert_eq!(
        refusal("https://other.example.com"),
        Some(DestinationRefusal::Allowlist)
    );
    assert_eq!(refusal("http://dr.example.com"), None);
    assert_eq!(refusal("https://dr.example.com/?a=1"), None);
    assert_eq!(DestinationRefusal::Port.as_str(), "port");
    assert_eq!(DestinationRefusal::Allowlist.as_str(), "allowlist");
}

#[test]
fn allowlist_entries_are_checked() {
    let cases = [
        (
            "dr.example.com",
            Ok(HostPattern::Exact("dr.example.com".into())),
        ),
        (
            "*.Example.com",
            Ok(HostPattern::Suffix("example.com".into())),
        ),
        ("[::1]", Ok(HostPattern::Exact("[::1]".into()))),
        ("", Err(())),
        ("*", Err(())),
        ("*.", Err(())),
        ("a.*.example.com", Err(())),
        ("https://dr.example.com", Err(())),
    ];
    for (entry, expected) in cases {
        assert_eq!(
            HostPattern::parse(entry).map_err(|_| ()),
            expected,
            "{entry}"
        );
    }
}

#[test]
fn port_settings_are_checked() {
    assert!(UrlPolicy::new(&[], &[]).is_err());
    assert!(UrlPolicy::new(&[], &[0]).is_err());
    assert_eq!(UrlPolicy::default().allowed_ports, vec![443]);
}

#[test]
fn names() {
    let cases = [
        ("dr", true),
        ("a", true),
        ("dr-eu-1", true),
        (&*format!("a{}", "b".repeat(62)), true),
        (&*format!("a{}", "b".repeat(63)), false),
        ("", false),
        ("1dr", false),
        ("-dr", false),
        ("Dr", false),
        ("dr_eu", false),
        ("dr.eu", false),
    ];
    for (name, ok) in cases {
        assert_eq!(check_name(name).is_ok(), ok, "{name:?}");
    }
}

#[test]
fn passwords_are_24_to_72_bytes() {
    for (length, ok) in [(0, false), (23, false), (24, true), (72, true), (73, false)] {
        let password = vec![b'p'; length];
        let got = check_password(&password);
        assert_eq!(got.is_ok(), ok, "{length}");
        if let Err(error) = got {
            assert_eq!(error.field, "password");
            assert!(!error.reason.contains("ppp"));
        }
    }
}

#[test]
fn usernames() {
    for (username, ok) in [
        ("replicator", true),
        ("", false),
        ("a:b", false),
        ("a\nb", false),
        (&*"u".repeat(256), false),
    ] {
        assert_eq!(check_username(username).is_ok(), ok, "{username:?}");
    }
}

fn certificate_pem(name: &str) -> String {
    rcgen::generate_simple_self_signed(vec![name.to_owned()])
        .expect("certificate")
        .cert
        .pem()
}

#[test]
fn ca_pem_holds_one_to_sixteen_certificates() {
    let one = certificate_pem("ca-1");
    let parsed = parse_ca_pem(&one).expect("one certificate");
    assert_eq!(parsed.certificates.len(), 1);
    assert_eq!(parsed.sha512.len(), 128);
    let sixteen: String = (0..16)
        .map(|i| certificate_pem(&format!("ca-{i}")))
        .collect();
    assert_eq!(
        parse_ca_pem(&sixteen).expect("sixteen").certificates.len(),
        16
    );
    let seventeen = format!("{sixteen}{one}");
    let error = parse_ca_pem(&seventeen).expect_err("seventeen");
    assert!(error.reason.contains("more than 16"), "{}", error.reason);
}

#[test]
fn ca_pem_refuses_nothing_keys_garbage_and_size() {
    let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
    let cert = certificate_pem("ca");
    let cases = [
        (String::new(), "no PEM certificate"),
        ("not pem at all".to_owned(), "no PEM certificate"),
        (format!("{cert}{key}"), "only certificates"),
        (
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_owned(),
            "not valid PEM",
        ),
        (
            "-----BEGIN CERTIFICATE-----\nAAAA\n".to_owned(),
            "not valid PEM",
        ),
        (" ".repeat(CA_PEM_BYTES_MAX + 1), "larger than"),
    ];
    for (text, words) in cases {
        let error = parse_ca_pem(&text).expect_err(words);
        assert_eq!(error.field, "ca_pem");
        assert!(error.reason.contains(words), "{words}: {}", error.reason);
    }
}

#[test]
fn the_ca_pem_digest_is_of_the_text_as_given() {
    let cert = certificate_pem("ca");
    let with_comment = format!("# our CA\n{cert}");
    assert_ne!(
        parse_ca_pem(&cert).expect("pem").sha512,
        parse_ca_pem(&with_comment).expect("pem").sha512
    );
}

#[test]
fn limits_at_and_past_their_bounds() {
    use limit_ranges::*;
    let cases = [
        ("limits.max_in_flight", &MAX_IN_FLIGHT, 1, 256),
        (
            "limits.request_timeout_ms",
            &REQUEST_TIMEOUT_MS,
            5_000,
            120_000,
        ),
        (
            "limits.idle_conn_timeout_ms",
            &IDLE_CONN_TIMEOUT_MS,
            1_000,
            600_000,
        ),
        (
            "limits.conn_max_age_ms",
            &CONN_MAX_AGE_MS,
            10_000,
            3_600_000,
        ),
        (
            "limits.check_interval_ms",
            &CHECK_INTERVAL_MS,
            5_000,
            3_600_000,
        ),
    ];
    for (field, range, low, high) in cases {
        assert!(check_limit(field, low, range).is_ok(), "{field} {low}");
        assert!(check_limit(field, high, range).is_ok(), "{field} {high}");
        for outside in [low - 1, high + 1] {
            let error = check_limit(field, outside, range).expect_err(field);
            assert_eq!(error.field, field);
            assert!(
                error.reason.contains(&outside.to_string()),
                "{}",
                error.reason
            );
        }
    }
}

#[test]
fn compression_names() {
    assert_eq!(parse_compression("zstd"), Ok(true));
    assert_eq!(parse_compression("none"), Ok(false));
    let error = parse_compression("gzip").expect_err("gzip");
    assert_eq!(error.field, "limits.compression");
}
