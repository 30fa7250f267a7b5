//! The driver component under an engine with epoch interruption, so that a test
//! stuck in guest code traps once its wall-clock cap has passed.
//!
//! Epochs only interrupt wasm code: a guest blocked inside a host call (a WASI
//! `poll` with no deadline) is not reached, and the worker running it is
//! abandoned instead (see `worker.rs`).

use crate::bindings::DriverPre;
use crate::guest::Guest;
use crate::{component_path, wasi_state, HostState};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Result, Store, UpdateDeadline};

/// How often the epoch advances; caps are rounded up to it.
pub const TICK: Duration = Duration::from_millis(50);

pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        crate::configure_face(&mut config);
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("wasmtime engine");
        let ticker = engine.clone();
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                ticker.increment_epoch();
            })
            .expect("epoch ticker thread");
        engine
    })
}

/// Compiles the component once per process. Epoch checks change the machine
/// code, so its cache file is tagged apart from `crate::load`'s.
fn load(path: &Path) -> Result<Component> {
    crate::load_with(engine(), path, "epoch-")
}

/// The driver component, linked with WASI; an error names what failed.
pub fn driver_pre() -> std::result::Result<&'static DriverPre<HostState>, String> {
    static PRE: OnceLock<std::result::Result<DriverPre<HostState>, String>> = OnceLock::new();
    PRE.get_or_init(|| {
        let path = component_path();
        let prepare = || -> Result<DriverPre<HostState>> {
            let component = load(&path)?;
            let mut linker = Linker::new(engine());
            crate::link_wasi(&mut linker)?;
            DriverPre::new(linker.instantiate_pre(&component)?)
        };
        prepare().map_err(|e| format!("loading {}: {e:#}", path.display()))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A fresh instance that may connect to `allowed` only and traps once `cap`
/// has passed (`None`: never).
pub fn instantiate(allowed: &[SocketAddr], cap: Option<Duration>) -> Result<Guest> {
    let pre = driver_pre().map_err(wasmtime::Error::msg)?;
    let mut store = Store::new(engine(), wasi_state(allowed, &[], false));
    match cap {
        Some(cap) => {
            let ticks = cap.as_millis().div_ceil(TICK.as_millis()).max(1);
            store.set_epoch_deadline(ticks as u64);
            store.epoch_deadline_trap();
        }
        None => store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(u64::MAX / 2))),
    }
    let driver = pre.instantiate(&mut store)?;
    Ok(Guest { store, driver })
}

/// Whether a wasmtime error is the epoch deadline firing.
pub fn is_interrupt(e: &wasmtime::Error) -> bool {
    e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt)
}
