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
use wasmtime::component::InstancePre;
use wasmtime::{AsContextMut, Result};

/// One instance's exports, with world `driver`'s accessor names.
pub struct Driver(view::DriverAsync);

impl Driver {
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
pub struct DriverPre<T: 'static>(view::DriverAsyncPre<T>);

impl<T: Send + 'static> DriverPre<T> {
    pub fn new(pre: InstancePre<T>) -> Result<Self> {
        view::DriverAsyncPre::new(pre).map(DriverPre)
    }

    /// Instantiates, blocking as world `driver`'s `instantiate` does.
    pub fn instantiate(&self, store: impl AsContextMut<Data = T>) -> Result<Driver> {
        crate::Wait::w(self.0.instantiate_async(store)).map(Driver)
    }
}
