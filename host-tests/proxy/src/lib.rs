//! A test-only, OP_MSG-aware TCP proxy that puts mongod's test behaviour (fail points, a
//! replica-set or sharded-cluster presentation, `buildInfo`/`getParameter`/..., CommandNotFound for commands the
//! backend lacks, mongod's Stable API checks, collection names the backend refuses mapped
//! to names it takes: see `names.rs`) in front of a MongoDB-wire-compatible server without any (nx-27017).
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
//! Admin commands of its own (any database, no authentication needed): `{proxyStats: 1}`,
//! `{proxyResetStats: 1}`, `{proxyStepDown: 1, newPrimary?: <member index>}`,
//! `{proxySetVersion: "8.0.0"}` (the server version presented; see `version.rs`). mongod
//! 4.4+'s streaming monitoring protocol (`topologyVersion` per member, the awaitable hello,
//! exhaust, `replSetFreeze`): see `conn/awaitable.rs`. Fail points:
//! see [`failpoint`]. What a presented version older than 5.0 refuses (nx-27017 takes it):
//! see `version_behaviour.rs`. What nx-27017 answers otherwise than mongod, emulated:
//! `bson_order.rs`, `local_sessions.rs`, `insert.rs`, `transaction_state.rs`,
//! `conn/distinct_id.rs`, `conn/where_sleep.rs` (`$where: "sleep(N) || true"`). Wire compression (snappy, zstd, zlib, negotiated as mongod does,
//! the backend spoken to plain): `compression.rs`. Authentication (users, SCRAM, PLAIN, X.509, auth on or off): see
//! [`auth`]; with auth on:
//!
//! ```no_run
//! use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, User};
//! let config = ProxyConfig {
//!     auth: AuthConfig::with_users(vec![User::new("root", "admin", "pw")]),
//!     ..ProxyConfig::new("127.0.0.1:27999".parse().unwrap())
//! };
//! let proxy = Proxy::start(config).unwrap();
//! println!("mongodb://root:pw@{}/?directConnection=true", proxy.addresses()[0]);
//! ```

mod admin;
mod api_version;
pub mod auth;
mod bson_order;
mod cluster_time;
mod codes;
mod commands;
pub mod compression;
mod conn;
pub mod failpoint;
mod frame;
mod insert;
mod load_balancer;
mod local_sessions;
mod mongos;
mod names;
mod objectid_filter;
mod retry_record;
mod server;
mod stats;
pub mod testcerts;
pub mod tls;
mod topology;
mod transaction_state;
mod version;
mod version_behaviour;

pub use auth::{AuthConfig, User};
pub use server::{Proxy, ProxyConfig};
pub use stats::Stats;
pub use topology::Topology;
