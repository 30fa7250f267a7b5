//! The native host: loads the mongo-wasi component under wasmtime and drives
//! it through its WIT exports. The component is compiled once per process;
//! each test gets a fresh instance whose sockets reach only the addresses it
//! was given.

#[cfg(not(feature = "async-face"))]
pub mod bindings {
    wasmtime::component::bindgen!({ path: "../wit", world: "driver" });
}

/// With feature `async-face`, the WASI 0.3 component behind the same names.
#[cfg(feature = "async-face")]
#[path = "async_face.rs"]
pub mod bindings;

/// The same world with async exports, for a host that runs the guest on its
/// own tokio runtime (the bench's second mongo-wasi contender).
pub mod async_bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "driver",
        exports: { default: async },
    });
}

pub mod bench_server;
pub mod dns_responder;
pub mod guest;
pub mod listeners;
pub mod recorder;
pub mod relay;
pub mod unified;

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::Result;
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub struct HostState {
    ctx: WasiCtx,
    table: ResourceTable,
    /// The guest's linear memory, as the store's resource limiter sees it.
    pub memory: GuestMemory,
}

/// How large the guest's linear memory has grown. Wasm memory never
/// shrinks, so its largest size is its size now: the peak of everything
/// the guest allocated so far. `limit` refuses growth past it (the guest's
/// allocator then fails as on a full 32-bit heap).
#[derive(Debug, Default)]
pub struct GuestMemory {
    pub bytes: usize,
    pub limit: Option<usize>,
}

impl wasmtime::ResourceLimiter for GuestMemory {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> Result<bool> {
        if self.limit.is_some_and(|limit| desired > limit) {
            return Ok(false);
        }
        self.bytes = self.bytes.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _max: Option<usize>,
    ) -> Result<bool> {
        Ok(true)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// The workspace root (host-tests' parent).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The component this build drives: the WASI 0.2 one, or with feature
/// `async-face` the WASI 0.3 one.
#[cfg(not(feature = "async-face"))]
pub const COMPONENT_FILE: &str = "mongo-wasi.wasm";
#[cfg(feature = "async-face")]
pub const COMPONENT_FILE: &str = "mongo-wasi-async.wasm";

/// Which face of the driver this build drives, for reports.
pub const FACE: &str = match cfg!(feature = "async-face") {
    false => "WASI 0.2 (sync exports)",
    true => "WASI 0.3 (async exports)",
};

/// Ends a call into the guest. The sync face's calls already returned; the
/// async face's are futures, run to completion here on this thread's
/// current-thread tokio runtime (which WASI's async host calls need).
pub trait Wait {
    type Output;
    fn w(self) -> Self::Output;
}

#[cfg(not(feature = "async-face"))]
impl<T, E> Wait for std::result::Result<T, E> {
    type Output = Self;
    fn w(self) -> Self {
        self
    }
}

#[cfg(feature = "async-face")]
impl<F: std::future::Future> Wait for F {
    type Output = F::Output;
    fn w(self) -> F::Output {
        thread_local! {
            static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread tokio runtime");
        }
        RUNTIME.with(|rt| rt.block_on(self))
    }
}

/// Lets `d` pass between calls into the guest. On the 0.3 face the store's
/// event loop runs meanwhile, so tasks started concurrently in it (spec-runner's
/// threads) go on; on the 0.2 face the thread sleeps.
pub fn idle(store: &mut Store<HostState>, d: std::time::Duration) -> Result<()> {
    #[cfg(not(feature = "async-face"))]
    {
        let _ = store;
        std::thread::sleep(d);
        Ok(())
    }
    #[cfg(feature = "async-face")]
    store
        .run_concurrent(async |_| tokio::time::sleep(d).await)
        .w()
}

/// Drops a guest resource: its destructor runs in the guest.
pub fn drop_resource(
    r: wasmtime::component::ResourceAny,
    store: &mut Store<HostState>,
) -> Result<()> {
    #[cfg(not(feature = "async-face"))]
    return r.resource_drop(store);
    #[cfg(feature = "async-face")]
    return r.resource_drop_async(store).w();
}

/// Links WASI into `linker` for this build's face: 0.2 with blocking host
/// calls, or 0.2 and 0.3 with async ones (the 0.3 component imports both).
pub fn link_wasi(linker: &mut Linker<HostState>) -> Result<()> {
    #[cfg(not(feature = "async-face"))]
    return wasmtime_wasi::p2::add_to_linker_sync(linker);
    #[cfg(feature = "async-face")]
    {
        wasmtime_wasi::p2::add_to_linker_async(linker)?;
        wasmtime_wasi::p3::add_to_linker(linker)
    }
}

/// Engine settings this build's face needs (async lifts on the 0.3 face).
pub fn configure_face(config: &mut Config) {
    #[cfg(feature = "async-face")]
    config.wasm_component_model_async(true);
    let _ = config;
}

/// `MONGO_WASI_COMPONENT`, else the release build in the workspace target dir.
pub fn component_path() -> PathBuf {
    std::env::var_os("MONGO_WASI_COMPONENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/component").join(COMPONENT_FILE))
}

pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        configure_face(&mut config);
        // For `perf record`: JIT code named in /tmp/perf-<pid>.map.
        if std::env::var_os("MONGO_WASI_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        Engine::new(&config).expect("wasmtime engine")
    })
}

/// Loads the component at `path` for the default engine.
pub fn load(path: &Path) -> Result<Component> {
    load_with(engine(), path, "")
}

/// Loads the component at `path` for `engine`. Cranelift output is cached
/// beside it as `<name>-<tag><hash>.cwasm` (engines configured differently
/// need different tags), so only the first process after a build compiles.
pub fn load_with(engine: &Engine, path: &Path, tag: &str) -> Result<Component> {
    let bytes = std::fs::read(path).map_err(|e| {
        wasmtime::Error::from(e).context(format!(
            "reading {} (run `cargo xtask build` first)",
            path.display()
        ))
    })?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("component");
    let cached = path.with_file_name(format!("{stem}-{tag}{:016x}.cwasm", hasher.finish()));
    if cached.exists() {
        // SAFETY: the file was written by `precompile_component` below, by an
        // engine configured as this one (the tag says so), into the build's
        // own target directory.
        if let Ok(c) = unsafe { Component::deserialize_file(engine, &cached) } {
            return Ok(c);
        }
    }
    let compiled = engine.precompile_component(&bytes)?;
    // Write then rename, so a parallel test process never reads half a file.
    let tmp = cached.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, &compiled).is_ok() {
        let _ = std::fs::rename(&tmp, &cached);
    }
    // SAFETY: `compiled` was just produced by this engine.
    unsafe { Component::deserialize(engine, &compiled) }
}

/// The driver component at [`component_path`], loaded once per process.
fn driver_component() -> &'static Component {
    static COMPONENT: OnceLock<Component> = OnceLock::new();
    COMPONENT.get_or_init(|| load(&component_path()).expect("driver component"))
}

/// The driver component, compiled once per process and linked with WASI.
pub fn driver_pre() -> &'static bindings::DriverPre<HostState> {
    static PRE: OnceLock<bindings::DriverPre<HostState>> = OnceLock::new();
    PRE.get_or_init(|| {
        let linker = linker().expect("linker");
        let pre = linker
            .instantiate_pre(driver_component())
            .expect("instantiate_pre");
        bindings::DriverPre::new(pre).expect("driver exports")
    })
}

/// [`driver_pre`] for async calls: WASI's async bindings, whose I/O waits are
/// futures on the caller's tokio runtime rather than blocking on
/// wasmtime-wasi's own multi-thread runtime.
pub fn async_driver_pre() -> &'static async_bindings::DriverPre<HostState> {
    static PRE: OnceLock<async_bindings::DriverPre<HostState>> = OnceLock::new();
    PRE.get_or_init(|| {
        let mut linker = Linker::new(engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("linker");
        let pre = linker
            .instantiate_pre(driver_component())
            .expect("instantiate_pre");
        async_bindings::DriverPre::new(pre).expect("driver exports")
    })
}

pub fn linker() -> Result<Linker<HostState>> {
    let mut linker = Linker::new(engine());
    link_wasi(&mut linker)?;
    Ok(linker)
}

/// A WASI context whose TCP may connect only to `allowed` (loopback
/// addresses given by the test), with name lookup denied. Binds to the
/// unspecified or a loopback address are allowed, since wasmtime checks the
/// implicit bind of `connect`.
pub fn wasi_state(allowed: &[SocketAddr], args: &[String], inherit_stdio: bool) -> HostState {
    let sandbox = Sandbox {
        tcp: allowed,
        ..Sandbox::default()
    };
    wasi_state_with(&sandbox, args, inherit_stdio)
}

/// What an instance may reach beyond [`wasi_state`]'s TCP list.
#[derive(Clone, Copy, Default)]
pub struct Sandbox<'a> {
    /// Loopback addresses TCP may connect to.
    pub tcp: &'a [SocketAddr],
    /// Loopback addresses UDP may send to and receive from (DNS servers).
    pub udp: &'a [SocketAddr],
    /// Extra environment variables (`MONGO_WASI_DNS_SERVER`).
    pub env: &'a [(&'a str, &'a str)],
    /// A host directory preopened read-only as the guest's `/etc`.
    pub etc: Option<&'a Path>,
    /// A host directory preopened read-only at the same path (e.g. for tlsCAFile).
    pub dir: Option<&'a Path>,
    /// Allow wasi:sockets/ip-name-lookup. Off by default: the lookup goes to
    /// the machine's resolver, outside any allow list, so only tests that
    /// connect to a name (`localhost`, TLS host name checks) turn it on.
    pub name_lookup: bool,
}

/// As [`wasi_state`], with UDP, environment and `/etc` as `sandbox` says.
pub fn wasi_state_with(sandbox: &Sandbox, args: &[String], inherit_stdio: bool) -> HostState {
    let Sandbox {
        tcp: allowed,
        udp,
        env,
        etc,
        dir,
        name_lookup,
    } = *sandbox;
    let allowed: Vec<SocketAddr> = allowed.to_vec();
    let udp: Vec<SocketAddr> = udp
        .iter()
        .copied()
        .filter(|a| a.ip().is_loopback())
        .collect();
    let mut b = WasiCtxBuilder::new();
    if let Some(dir) = dir {
        let guest_path = dir.to_string_lossy();
        b.preopened_dir(dir, &*guest_path, FsPerms::ReadOnly)
            .expect("preopen the directory");
    }
    if inherit_stdio {
        b.inherit_stdio();
    }
    b.args(args)
        .env(
            "MONGO_WASI_PLATFORM",
            format!("wasmtime {}", wasmtime_version()),
        )
        .allow_tcp(true)
        .allow_udp(!udp.is_empty())
        .allow_ip_name_lookup(name_lookup);
    for (k, v) in env {
        b.env(k, v);
    }
    if let Some(dir) = etc {
        b.preopened_dir(dir, "/etc", FsPerms::ReadOnly)
            .expect("preopen /etc");
    }
    if let Some(dir) = dir {
        let guest_path = dir.to_string_lossy();
        b.preopened_dir(dir, &*guest_path, FsPerms::ReadOnly)
            .expect("preopen the directory");
    }
    b.socket_addr_check(move |addr, use_| {
        let ok = match use_ {
            SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                addr.ip().is_unspecified() || addr.ip().is_loopback()
            }
            SocketAddrUse::TcpConnect => addr.ip().is_loopback() && allowed.contains(&addr),
            SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => udp.contains(&addr),
            _ => false,
        };
        Box::pin(async move { ok })
    });
    HostState {
        ctx: b.build(),
        table: ResourceTable::new(),
        memory: GuestMemory::default(),
    }
}

/// A store whose guest memory growth `HostState::memory` tracks.
pub fn new_store(state: HostState) -> Store<HostState> {
    let mut store = Store::new(engine(), state);
    store.limiter(|s| &mut s.memory);
    store
}

fn wasmtime_version() -> &'static str {
    "48"
}

/// The running nx-27017 that `cargo xtask test` started: its URI and address.
pub fn test_server() -> (String, SocketAddr) {
    let uri = std::env::var("MONGO_WASI_URI").expect(
        "MONGO_WASI_URI is not set: run `cargo xtask test`, or start nx-27017 and set MONGO_WASI_URI=mongodb://127.0.0.1:PORT/",
    );
    let hostport = uri
        .trim_start_matches("mongodb://")
        .split(['/', '?'])
        .next()
        .unwrap_or_default();
    let addr: SocketAddr = hostport
        .parse()
        .expect("MONGO_WASI_URI names a loopback ip:port");
    assert!(addr.ip().is_loopback(), "tests talk to loopback only");
    (uri, addr)
}

/// A tool's `--backend ip:port`: a socket address on loopback, else an error
/// naming the flag (tools here talk to loopback only).
pub fn loopback_backend(v: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = v.parse().map_err(|e| format!("--backend {v}: {e}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("--backend {v}: loopback only"));
    }
    Ok(addr)
}
