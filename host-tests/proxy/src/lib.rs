//! A test-only, OP_MSG-aware TCP proxy that puts mongod's test behaviour (fail points, a
//! replica-set presentation, `buildInfo`/`getParameter`/..., CommandNotFound for commands the
//! backend lacks) in front of a MongoDB-wire-compatible server without any (nx-27017).
//!
//! ```no_run
//! use mongo_wasi_proxy::{Proxy, ProxyConfig};
//! let proxy = Proxy::start(ProxyConfig::new("127.0.0.1:27999".parse().unwrap())).unwrap();
//! println!("mongodb://{}/?directConnection=true", proxy.addresses()[0]);
//! ```
//!
//! With [`ProxyConfig::tls`] it terminates TLS on the client side (see [`testcerts`]); the
//! backend connection stays plain.
//!
//! Admin commands of its own (any database): `{proxyStats: 1}`, `{proxyResetStats: 1}`,
//! `{proxyStepDown: 1, newPrimary?: <member index>}`. Fail points: see [`failpoint`].

mod admin;
mod codes;
mod commands;
mod conn;
pub mod failpoint;
mod frame;
mod server;
mod stats;
pub mod testcerts;
pub mod tls;
mod topology;

pub use server::{Proxy, ProxyConfig};
pub use stats::Stats;
pub use topology::Topology;
