//! `std::net` addresses to and from wasi:sockets' records. Both faces' records
//! have the same shape but are different types (0.2's in `wasi`, 0.3's in
//! `wasip3`), so the conversions are written once here and expanded in each
//! face's `tcp` with its own types: neither face names the other's crate.

/// Defines `to_wasi_addr(ip, port) -> (IpAddressFamily, IpSocketAddress)` and
/// `from_wasi_ip(IpAddress) -> IpAddr` over the types in the module `$types`
/// (e.g. `wasi::sockets::network`).
macro_rules! wasi_addr_conversions {
    ($($types:ident)::+) => {
        pub(super) fn to_wasi_addr(
            ip: std::net::IpAddr,
            port: u16,
        ) -> ($($types)::+::IpAddressFamily, $($types)::+::IpSocketAddress) {
            use $($types)::+::{
                IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, Ipv6SocketAddress,
            };
            match ip {
                std::net::IpAddr::V4(v4) => {
                    let [a, b, c, d] = v4.octets();
                    let addr = Ipv4SocketAddress {
                        port,
                        address: (a, b, c, d),
                    };
                    (IpAddressFamily::Ipv4, IpSocketAddress::Ipv4(addr))
                }
                std::net::IpAddr::V6(v6) => {
                    let s = v6.segments();
                    let addr = Ipv6SocketAddress {
                        port,
                        flow_info: 0,
                        address: (s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
                        scope_id: 0,
                    };
                    (IpAddressFamily::Ipv6, IpSocketAddress::Ipv6(addr))
                }
            }
        }

        pub(super) fn from_wasi_ip(ip: $($types)::+::IpAddress) -> std::net::IpAddr {
            use $($types)::+::IpAddress;
            match ip {
                IpAddress::Ipv4((a, b, c, d)) => std::net::IpAddr::from([a, b, c, d]),
                IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => {
                    std::net::IpAddr::from([a, b, c, d, e, f, g, h])
                }
            }
        }
    };
}
