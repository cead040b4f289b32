//! The post-DNS address guard: every address a remote's host resolves to
//! (or the address a URL names) is checked before a connection is made, so
//! a remote cannot point this cluster at itself, at a cloud metadata
//! service or at link-local neighbours (spec §4, "Outbound").
//!
//! Refused: loopback, unspecified (and `0.0.0.0/8`), link-local
//! (`169.254.0.0/16`, `fe80::/10`), the cloud metadata addresses
//! (`169.254.169.254`, `fd00:ec2::254`, `100.100.100.200`), multicast and
//! the IPv4 broadcast address. An IPv4-mapped IPv6 address is judged as
//! the IPv4 address it carries.
//!
//! `remotes.allow_addresses` CIDRs exempt what they contain, with one
//! exception: a metadata address is exempt only when an entry names that
//! single address (`/32` or `/128`), so a broad entry such as
//! `169.254.0.0/16` cannot open the metadata service by accident. Loopback
//! is also let through by [`AddressGuard::allow_loopback`], a switch for
//! tests and labs that is off by default.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The cloud metadata services' addresses (AWS, GCP, Azure, OpenStack on
/// `169.254.169.254`; AWS over IPv6; Alibaba Cloud).
pub const METADATA_ADDRESSES: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// Why the guard refused an address; also the `reason` a refusal is
/// logged with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// `127.0.0.0/8` or `::1`.
    #[error("loopback address")]
    Loopback,
    /// `0.0.0.0/8` or `::`.
    #[error("unspecified address")]
    Unspecified,
    /// `169.254.0.0/16` or `fe80::/10`.
    #[error("link-local address")]
    LinkLocal,
    /// One of [`METADATA_ADDRESSES`].
    #[error("cloud metadata address")]
    Metadata,
    /// `224.0.0.0/4` or `ff00::/8`.
    #[error("multicast address")]
    Multicast,
    /// `255.255.255.255`.
    #[error("broadcast address")]
    Broadcast,
}

/// A refused address and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("destination refused: {address} is a {reason}")]
pub struct DestinationRefused {
    /// The address the host resolved to or the URL named.
    pub address: IpAddr,
    /// Which range it fell in.
    pub reason: Refused,
}

/// The guard of one node: the exempt CIDRs and the loopback switch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressGuard {
    /// `remotes.allow_addresses`: CIDRs exempt from the guard.
    pub allow: Vec<IpNet>,
    /// Lets loopback through (tests and labs only; off by default).
    pub allow_loopback: bool,
}

impl AddressGuard {
    /// A guard with `allow` exempt and loopback refused.
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self {
            allow,
            allow_loopback: false,
        }
    }

    /// Whether a connection to `address` may be made.
    ///
    /// # Errors
    /// [`DestinationRefused`] naming the range the address fell in.
    pub fn check(&self, address: IpAddr) -> Result<(), DestinationRefused> {
        let address = address.to_canonical();
        let Some(reason) = refused_range(address) else {
            return Ok(());
        };
        let exempt = match reason {
            Refused::Metadata => self.allow.iter().any(|net| {
                net.prefix_len() == net.max_prefix_len() && net.addr().to_canonical() == address
            }),
            Refused::Loopback if self.allow_loopback => true,
            _ => self.allow.iter().any(|net| contains(net, address)),
        };
        if exempt {
            Ok(())
        } else {
            Err(DestinationRefused { address, reason })
        }
    }

    /// Checks every address of a resolved host: one refused address
    /// refuses the host, so a name that mixes a public address with a
    /// refused one cannot be used to reach the refused one later.
    ///
    /// # Errors
    /// The first [`DestinationRefused`].
    pub fn check_all(
        &self,
        addresses: impl IntoIterator<Item = IpAddr>,
    ) -> Result<(), DestinationRefused> {
        addresses
            .into_iter()
            .try_for_each(|address| self.check(address))
    }
}

/// `net` contains `address`, comparing IPv4-mapped IPv6 as IPv4.
fn contains(net: &IpNet, address: IpAddr) -> bool {
    match (net, address.to_canonical()) {
        (IpNet::V6(v6), IpAddr::V4(v4)) => v6.contains(&v4.to_ipv6_mapped()),
        (_, address) => net.contains(&address),
    }
}

/// The refused range `address` (already canonical) falls in, if any.
/// Metadata comes first: `169.254.169.254` is also link-local.
fn refused_range(address: IpAddr) -> Option<Refused> {
    if METADATA_ADDRESSES.contains(&address) {
        return Some(Refused::Metadata);
    }
    match address {
        IpAddr::V4(v4) => {
            if v4.is_loopback() {
                Some(Refused::Loopback)
            } else if v4.octets()[0] == 0 {
                Some(Refused::Unspecified)
            } else if v4.is_link_local() {
                Some(Refused::LinkLocal)
            } else if v4.is_multicast() {
                Some(Refused::Multicast)
            } else if v4.is_broadcast() {
                Some(Refused::Broadcast)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                Some(Refused::Loopback)
            } else if v6.is_unspecified() {
                Some(Refused::Unspecified)
            } else if v6.is_unicast_link_local() {
                Some(Refused::LinkLocal)
            } else if v6.is_multicast() {
                Some(Refused::Multicast)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn reason(guard: &AddressGuard, text: &str) -> Option<Refused> {
        guard.check(ip(text)).err().map(|refused| refused.reason)
    }

    #[test]
    fn every_refused_range_is_refused_with_its_reason() {
        let guard = AddressGuard::default();
        let cases = [
            ("127.0.0.1", Refused::Loopback),
            ("127.255.255.254", Refused::Loopback),
            ("::1", Refused::Loopback),
            ("0.0.0.0", Refused::Unspecified),
            ("0.1.2.3", Refused::Unspecified),
            ("::", Refused::Unspecified),
            ("169.254.0.1", Refused::LinkLocal),
            ("169.254.255.255", Refused::LinkLocal),
            ("fe80::1", Refused::LinkLocal),
            ("febf:ffff::1", Refused::LinkLocal),
            ("169.254.169.254", Refused::Metadata),
            ("fd00:ec2::254", Refused::Metadata),
            ("100.100.100.200", Refused::Metadata),
            ("224.0.0.1", Refused::Multicast),
            ("239.255.255.255", Refused::Multicast),
            ("ff02::1", Refused::Multicast),
            ("255.255.255.255", Refused::Broadcast),
        ];
        for (address, expected) in cases {
            assert_eq!(reason(&guard, address), Some(expected), "{address}");
        }
    }

    #[test]
    fn public_and_private_unicast_addresses_pass() {
        let guard = AddressGuard::default();
        for address in [
            "8.8.8.8",
            "10.0.0.1",
            "192.168.1.10",
            "172.16.0.1",
            "100.100.100.201",
            "169.253.255.255",
            "169.255.0.0",
            "2001:db8::1",
            "fd00:ec2::253",
            "fec0::1",
        ] {
            assert_eq!(reason(&guard, address), None, "{address}");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_is_judged_as_ipv4() {
        let guard = AddressGuard::default();
        assert_eq!(reason(&guard, "::ffff:127.0.0.1"), Some(Refused::Loopback));
        assert_eq!(
            reason(&guard, "::ffff:169.254.169.254"),
            Some(Refused::Metadata)
        );
        assert_eq!(reason(&guard, "::ffff:8.8.8.8"), None);
        let refused = guard.check(ip("::ffff:127.0.0.1")).unwrap_err();
        assert_eq!(refused.address, ip("127.0.0.1"));
    }

    #[test]
    fn the_loopback_switch_lets_only_loopback_through() {
        let guard = AddressGuard {
            allow_loopback: true,
            ..AddressGuard::default()
        };
        assert_eq!(reason(&guard, "127.0.0.1"), None);
        assert_eq!(reason(&guard, "::1"), None);
        assert_eq!(reason(&guard, "169.254.1.1"), Some(Refused::LinkLocal));
        assert_eq!(reason(&guard, "0.0.0.0"), Some(Refused::Unspecified));
        assert_eq!(reason(&guard, "169.254.169.254"), Some(Refused::Metadata));
    }

    #[test]
    fn allow_list_exempts_what_it_contains_and_nothing_else() {
        let guard = AddressGuard::new(vec![net("169.254.10.0/24"), net("fe80::/64")]);
        assert_eq!(reason(&guard, "169.254.10.7"), None);
        assert_eq!(reason(&guard, "169.254.11.7"), Some(Refused::LinkLocal));
        assert_eq!(reason(&guard, "fe80::9"), None);
        assert_eq!(reason(&guard, "fe80:0:0:1::9"), Some(Refused::LinkLocal));
        assert_eq!(reason(&guard, "127.0.0.1"), Some(Refused::Loopback));
    }

    #[test]
    fn an_ipv6_mapped_allow_entry_covers_the_ipv4_address() {
        let guard = AddressGuard::new(vec![net("::ffff:127.0.0.0/104")]);
        assert_eq!(reason(&guard, "127.0.0.1"), None);
        assert_eq!(reason(&guard, "::1"), Some(Refused::Loopback));
    }

    #[test]
    fn a_broad_allow_entry_does_not_open_a_metadata_address() {
        let guard = AddressGuard::new(vec![net("169.254.0.0/16"), net("0.0.0.0/0")]);
        assert_eq!(reason(&guard, "169.254.169.254"), Some(Refused::Metadata));
        assert_eq!(reason(&guard, "169.254.1.1"), None);
        let exact = AddressGuard::new(vec![net("169.254.169.254/32")]);
        assert_eq!(reason(&exact, "169.254.169.254"), None);
    }

    #[test]
    fn one_refused_address_refuses_the_whole_host() {
        let guard = AddressGuard::default();
        let addresses = [ip("8.8.8.8"), ip("127.0.0.1")];
        let refused = guard.check_all(addresses).unwrap_err();
        assert_eq!(refused.reason, Refused::Loopback);
        assert!(guard.check_all([ip("8.8.8.8"), ip("1.1.1.1")]).is_ok());
    }
}
