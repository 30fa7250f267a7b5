//! World `driver-async` (the WASI 0.3 component) under the names of world
//! `driver`'s bindings, so the runner's code serves both faces: the same
//! records and resources, each interface's `X-async` twin re-exported as `X`,
//! and calls that return futures ([`crate::Wait::w`] blocks on them).

mod view {
    include!(concat!(env!("OUT_DIR"), "/async_view.rs"));
}

pub mod exports {
    pub mod mongo_wasi {
        pub mod driver {
            pub use crate::bindings::view::exports::mongo_wasi::driver::{
                client_async as client, collection_async as collection, cursor_async as cursor,
                database_async as database, gridfs_async as gridfs, session_async as session,
                types,
            };
        }
    }
}

use exports::mongo_wasi::driver::{client, collection, cursor, database, gridfs, session};
use wasmtime::component::{Func, Instance, InstancePre};
use wasmtime::{AsContextMut, Result};

/// One instance's exports, with world `driver`'s accessor names.
pub struct Driver(view::DriverAsync, Instance);

impl Driver {
    /// The export `func` of interface `interface` (its name in world
    /// `driver`, e.g. `collection` for `collection-async`), for calls made
    /// with `call_concurrent` rather than through the bindings' `call_x`.
    pub fn func(&self, mut store: impl AsContextMut, interface: &str, func: &str) -> Result<Func> {
        let name = format!("mongo-wasi:driver/{interface}-async@0.2.0");
        let missing = || wasmtime::format_err!("the component exports no {name}#{func}");
        let iface = self
            .1
            .get_export_index(&mut store, None, &name)
            .ok_or_else(missing)?;
        let index = self
            .1
            .get_export_index(&mut store, Some(&iface), func)
            .ok_or_else(missing)?;
        self.1.get_func(&mut store, index).ok_or_else(missing)
    }

    pub fn mongo_wasi_driver_client(&self) -> &client::Guest {
        self.0.mongo_wasi_driver_client_async()
    }
    pub fn mongo_wasi_driver_collection(&self) -> &collection::Guest {
        self.0.mongo_wasi_driver_collection_async()
    }
    pub fn mongo_wasi_driver_cursor(&self) -> &cursor::Guest {
        self.0.mongo_wasi_driver_cursor_async()
    }
    pub fn mongo_wasi_driver_database(&self) -> &database::Guest {
        self.0.mongo_wasi_driver_database_async()
    }
    pub fn mongo_wasi_driver_gridfs(&self) -> &gridfs::Guest {
        self.0.mongo_wasi_driver_gridfs_async()
    }
    pub fn mongo_wasi_driver_session(&self) -> &session::Guest {
        self.0.mongo_wasi_driver_session_async()
    }
}

/// The component linked and its exports found, ready to instantiate.
pub struct DriverPre<T: 'static>(view::DriverAsyncPre<T>, view::DriverAsyncIndices);

impl<T: Send + 'static> DriverPre<T> {
    pub fn new(pre: InstancePre<T>) -> Result<Self> {
        let indices = view::DriverAsyncIndices::new(&pre)?;
        Ok(DriverPre(view::DriverAsyncPre::new(pre)?, indices))
    }

    /// Instantiates, blocking as world `driver`'s `instantiate` does; the
    /// instance is kept for [`Driver::func`].
    pub fn instantiate(&self, mut store: impl AsContextMut<Data = T>) -> Result<Driver> {
        let instance = crate::Wait::w(self.0.instance_pre().instantiate_async(&mut store))?;
        let driver = self.1.load(&mut store, &instance)?;
        Ok(Driver(driver, instance))
    }
}
