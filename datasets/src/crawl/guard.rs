//! The address guard. "Fetch this URL for me" is the shape of request that otherwise reads a cloud
//! metadata endpoint (`http://169.254.169.254/latest/meta-data/`) or a service on the crawler's own
//! network into a file, so addresses that are not on the public internet are refused: loopback,
//! private, link-local, shared (CGNAT), unspecified, broadcast, multicast and reserved ranges, in
//! IPv4 and IPv6, and IPv4 addresses wrapped in IPv6 (`::ffff:10.0.0.1`) as the address inside.
//!
//! Checking a name and then letting the HTTP client resolve it again would leave a gap: a name can
//! resolve to a public address for the check and to a private one for the connection. So the
//! check is done by the resolver the client connects through, [`GuardedResolver`], which refuses a
//! name if any of its addresses is forbidden and hands the client only addresses it has checked.
//! Addresses written into the URL (`http://10.0.0.1/`) never reach a resolver; [`Guard::check_url`]
//! checks those before every request, redirects included.
//!
//! A site served from this machine (the tests' servers, the Rust book that `cargo xtask rust-book`
//! builds and crawls) needs loopback, so the guard has one exception, [`Guard::allow_loopback`],
//! set only by `CrawlConfig::allow_loopback`, which no flag of the crawl example reaches. It admits
//! exactly 127.0.0.0/8 and `::1`; everything else (private, link-local, mapped loopback) stays
//! refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use url::{Host, Url};

/// Why an address is not on the public internet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forbidden {
    Loopback,
    Private,
    LinkLocal,
    Metadata,
    SharedCgnat,
    Unspecified,
    Broadcast,
    Multicast,
    Reserved,
    UniqueLocal,
}

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Forbidden::Loopback => "loopback",
            Forbidden::Private => "private (RFC 1918)",
            Forbidden::LinkLocal => "link-local",
            Forbidden::Metadata => "link-local: the cloud metadata address",
            Forbidden::SharedCgnat => "shared address space (CGNAT, 100.64.0.0/10)",
            Forbidden::Unspecified => "unspecified",
            Forbidden::Broadcast => "broadcast",
            Forbidden::Multicast => "multicast",
            Forbidden::Reserved => "reserved",
            Forbidden::UniqueLocal => "unique-local (fc00::/7)",
        })
    }
}

/// Why `ip` may not be fetched from, or `None` when it is a public address.
pub fn classify(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Forbidden> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b, c, d) {
        (0, ..) => Forbidden::Unspecified,
        (10, ..) | (172, 16..=31, ..) | (192, 168, ..) => Forbidden::Private,
        (100, 64..=127, ..) => Forbidden::SharedCgnat,
        (127, ..) => Forbidden::Loopback,
        (169, 254, 169, 254) => Forbidden::Metadata,
        (169, 254, ..) => Forbidden::LinkLocal,
        // IETF protocol assignments, benchmarking.
        (192, 0, 0, _) | (198, 18..=19, ..) => Forbidden::Reserved,
        (255, 255, 255, 255) => Forbidden::Broadcast,
        (224..=239, ..) => Forbidden::Multicast,
        (240..=255, ..) => Forbidden::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some(Forbidden::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Forbidden::Loopback);
    }
    // IPv4 inside IPv6 is judged as the IPv4 address: mapped (::ffff:a.b.c.d), the deprecated
    // compatible form (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::).
    let inner =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => {
            return classify_v4(inner(hi, lo));
        }
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return classify_v4(inner(hi, lo)),
        [0x2002, hi, lo, ..] => return classify_v4(inner(hi, lo)),
        _ => {}
    }
    match s[0] {
        0xfc00..=0xfdff => Some(Forbidden::UniqueLocal),
        0xfe80..=0xfebf => Some(Forbidden::LinkLocal),
        // Site-local, deprecated but still routed inside some networks.
        0xfec0..=0xfeff => Some(Forbidden::Private),
        0xff00..=0xffff => Some(Forbidden::Multicast),
        _ => None,
    }
}

/// A refused address, naming the host it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{host}: address {addr} is {why}: refused")]
pub struct Refused {
    pub host: String,
    pub addr: IpAddr,
    pub why: Forbidden,
}

/// The rules in force for one crawl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    /// Admit 127.0.0.0/8 and `::1` (and nothing else). Tests only.
    pub allow_loopback: bool,
}

impl Guard {
    /// Refuses `addr` (reached through `host`) unless it is public.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Refused> {
        let plain_loopback = match addr {
            IpAddr::V4(v4) => v4.is_loopback(),
            IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
        };
        if self.allow_loopback && plain_loopback {
            return Ok(());
        }
        match classify(addr) {
            Some(why) => Err(Refused {
                host: host.to_string(),
                addr,
                why,
            }),
            None => Ok(()),
        }
    }

    /// Checks a URL whose host is an address (which no resolver will see). A name passes here and
    /// is checked when it is resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        match url.host() {
            Some(Host::Ipv4(v4)) => self.check(&v4.to_string(), IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.check(&format!("[{v6}]"), IpAddr::V6(v6)),
            Some(Host::Domain(_)) | None => Ok(()),
        }
    }

    /// Resolves `name`, refusing it if any of its addresses is forbidden (a name with one public
    /// and one private address could be steered to either). Returns the checked addresses.
    pub fn resolve(&self, name: &str) -> Result<Vec<SocketAddr>, ResolveError> {
        let addrs: Vec<SocketAddr> = (name, 0u16)
            .to_socket_addrs()
            .map_err(|e| ResolveError::Lookup(format!("{name}: {e}")))?
            .collect();
        if addrs.is_empty() {
            return Err(ResolveError::Lookup(format!("{name}: no addresses")));
        }
        for a in &addrs {
            self.check(name, a.ip()).map_err(ResolveError::Refused)?;
        }
        Ok(addrs)
    }
}

/// Why a name gave no address to connect to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Refused(Refused),
    #[error("cannot resolve {0}")]
    Lookup(String),
}

/// The resolver the crawler's HTTP client connects through: [`Guard::resolve`], so that the
/// address connected to is one that was checked.
///
/// The lookup is the system's, done inside `resolve` itself rather than on a worker thread: the
/// crawler makes one request at a time, so blocking the client's runtime for a lookup delays
/// nothing else.
pub struct GuardedResolver {
    pub guard: Guard,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let result = self
            .guard
            .resolve(name.as_str())
            .map(|addrs| Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
        Box::pin(std::future::ready(result))
    }
}

/// The [`Refused`] somewhere in an error's chain of sources, if the guard caused it.
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r.clone());
        }
        if let Some(ResolveError::Refused(r)) = e.downcast_ref::<ResolveError>() {
            return Some(r.clone());
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_table() {
        use Forbidden::*;
        let table: &[(&str, Option<Forbidden>)] = &[
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(Metadata)),
            ("169.254.1.1", Some(LinkLocal)),
            ("100.64.0.1", Some(SharedCgnat)),
            ("100.127.255.255", Some(SharedCgnat)),
            ("100.128.0.1", None),
            ("0.0.0.0", Some(Unspecified)),
            ("255.255.255.255", Some(Broadcast)),
            ("224.0.0.1", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("93.184.216.34", None),
            ("8.8.8.8", None),
            ("::1", Some(Loopback)),
            ("::", Some(Unspecified)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:169.254.169.254", Some(Metadata)),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::10.0.0.1", Some(Private)),
            ("2002:a00:1::", Some(Private)),
            ("2606:4700::1111", None),
        ];
        for &(addr, want) in table {
            let ip: IpAddr = addr.parse().unwrap();
            assert_eq!(classify(ip), want, "{addr}");
        }
    }

    #[test]
    fn the_test_exception_admits_plain_loopback_only() {
        let open = Guard {
            allow_loopback: true,
        };
        let shut = Guard::default();
        for ok in ["127.0.0.1", "127.1.2.3", "::1"] {
            let ip: IpAddr = ok.parse().unwrap();
            assert!(open.check("h", ip).is_ok(), "{ok}");
            assert!(shut.check("h", ip).is_err(), "{ok}");
        }
        for refused in [
            "::ffff:127.0.0.1",
            "10.0.0.1",
            "169.254.169.254",
            "192.168.0.1",
            "0.0.0.0",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(open.check("h", ip).is_err(), "{refused}");
        }
    }

    #[test]
    fn ip_literal_urls_are_checked_and_names_are_left_to_the_resolver() {
        let g = Guard::default();
        for url in [
            "http://127.0.0.1/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://169.254.169.254/latest/meta-data/",
            // Other spellings of 127.0.0.1, which the URL parser normalises.
            "http://2130706433/",
            "http://0x7f.1/",
        ] {
            let e = g.check_url(&Url::parse(url).unwrap()).unwrap_err();
            assert!(e.to_string().ends_with("refused"), "{url}: {e}");
        }
        assert!(
            g.check_url(&Url::parse("http://example.com/").unwrap())
                .is_ok()
        );
        let e = g
            .check_url(&Url::parse("http://169.254.169.254/").unwrap())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "169.254.169.254: address 169.254.169.254 is link-local: the cloud metadata address: refused"
        );
    }

    #[test]
    fn the_resolver_refuses_a_name_for_loopback_and_finds_it_in_an_error_chain() {
        let e = Guard::default().resolve("localhost").unwrap_err();
        assert!(
            matches!(e, ResolveError::Refused(ref r) if r.why == Forbidden::Loopback),
            "{e}"
        );
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
        assert!(refusal_in(boxed.as_ref()).is_some());
        let open = Guard {
            allow_loopback: true,
        };
        let addrs = open.resolve("localhost").unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
