//! One instance of the driver component in a store of its own, with a
//! `ResourceLimiter` that measures (and caps) the guest's linear memory. An `Err`
//! from any call here is a trap: the instance is dead and the soak makes a new one.

use host_tests::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use host_tests::bindings::exports::mongo_wasi::driver::collection::{
    AggregateOptions, FindOptions, OpOptions, UpdateSpec,
};
use host_tests::bindings::exports::mongo_wasi::driver::database::CollectionOptions;
use host_tests::bindings::exports::mongo_wasi::driver::types::{CommandEvent, Error, PoolEvent};
use host_tests::bindings::{Driver, DriverPre};
use host_tests::HostState;
use std::net::SocketAddr;
use std::sync::OnceLock;
use wasmtime::component::{Linker, ResourceAny};
use wasmtime::{ResourceLimiter, Result, Store};
use wasmtime_wasi::{WasiCtxView, WasiView};

pub type WitResult<T> = std::result::Result<T, Error>;

/// The guest's linear memory: what it has now (memories only grow), and the cap past
/// which a `memory.grow` fails (the guest's allocator then aborts: a trap).
pub struct GuestMemory {
    pub bytes: usize,
    pub cap: usize,
    pub denied: u64,
}

impl ResourceLimiter for GuestMemory {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool> {
        // Called at instantiation too (from 0), once per memory: sum them.
        let next = self.bytes.saturating_sub(current) + desired;
        if next > self.cap {
            self.denied += 1;
            return Ok(false);
        }
        self.bytes = next;
        Ok(true)
    }

    fn table_growing(&mut self, _: usize, _: usize, _: Option<usize>) -> Result<bool> {
        Ok(true)
    }
}

pub struct SoakState {
    host: HostState,
    pub memory: GuestMemory,
}

impl WasiView for SoakState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.host.ctx()
    }
}

/// The component compiled once per process (the `.cwasm` cache of `host_tests::load`).
fn pre() -> &'static DriverPre<SoakState> {
    static PRE: OnceLock<DriverPre<SoakState>> = OnceLock::new();
    PRE.get_or_init(|| {
        let component = host_tests::load(&host_tests::component_path()).expect("the component");
        let mut linker = Linker::new(host_tests::engine());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("WASI");
        let pre = linker.instantiate_pre(&component).expect("instantiate_pre");
        DriverPre::new(pre).expect("the driver's exports")
    })
}

pub struct Instance {
    store: Store<SoakState>,
    driver: Driver,
    client: ResourceAny,
    coll: ResourceAny,
}

fn op_options(timeout_ms: Option<u64>) -> OpOptions {
    OpOptions {
        timeout_ms,
        ..host_tests::guest::no_options()
    }
}

impl Instance {
    /// A new instance, connected to `uri` (which may reach only `allowed`), using `db.coll`.
    pub fn connect(
        allowed: &[SocketAddr],
        uri: &str,
        db: &str,
        coll: &str,
        memory_cap: usize,
    ) -> Result<WitResult<Instance>> {
        let state = SoakState {
            host: host_tests::wasi_state(allowed, &[], true),
            memory: GuestMemory {
                bytes: 0,
                cap: memory_cap,
                denied: 0,
            },
        };
        let mut store = Store::new(host_tests::engine(), state);
        store.limiter(|s| &mut s.memory);
        let driver = pre().instantiate(&mut store)?;
        let opts = ClientOptions {
            timeout_ms: None,
            monitor_commands: true,
            server_api: None,
            tls_ca_pem: None,
            tls_certificate_key_pem: None,
            logging: None,
        };
        let client = match driver
            .mongo_wasi_driver_client()
            .client()
            .call_connect(&mut store, uri, &opts)?
        {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let copts = CollectionOptions {
            timeout_ms: None,
            read_concern: None,
            write_concern: None,
            read_preference: None,
        };
        let database = driver
            .mongo_wasi_driver_client()
            .client()
            .call_database(&mut store, client, db, &copts)?;
        let coll = driver
            .mongo_wasi_driver_database()
            .database()
            .call_collection(&mut store, database, coll, &copts)?;
        database.resource_drop(&mut store)?;
        Ok(Ok(Instance {
            store,
            driver,
            client,
            coll,
        }))
    }

    pub fn memory(&self) -> &GuestMemory {
        &self.store.data().memory
    }

    pub fn insert_one(&mut self, doc: &[u8], timeout_ms: Option<u64>) -> Result<WitResult<()>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_insert_one(
                &mut self.store,
                self.coll,
                &doc.to_vec(),
                &op_options(timeout_ms),
            )?;
        Ok(r.map(|_| ()))
    }

    pub fn drop_collection(&mut self) -> Result<WitResult<()>> {
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_drop(&mut self.store, self.coll, &op_options(None))
    }

    pub fn insert_many(&mut self, docs: &[Vec<u8>]) -> Result<WitResult<()>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_insert_many(&mut self.store, self.coll, docs, &op_options(None))?;
        Ok(r.map(|_| ()).map_err(|e| e.error))
    }

    /// Answers the matched count.
    pub fn update_one(
        &mut self,
        filter: &[u8],
        update: &[u8],
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<i64>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_update_one(
                &mut self.store,
                self.coll,
                &filter.to_vec(),
                &UpdateSpec::Document(update.to_vec()),
                &op_options(timeout_ms),
            )?;
        Ok(r.map(|u| u.matched_count))
    }

    /// Answers the deleted count.
    pub fn delete_one(&mut self, filter: &[u8], timeout_ms: Option<u64>) -> Result<WitResult<i64>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_delete_one(
                &mut self.store,
                self.coll,
                &filter.to_vec(),
                &op_options(timeout_ms),
            )?;
        Ok(r.map(|d| d.deleted_count))
    }

    pub fn find_one(
        &mut self,
        filter: &[u8],
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<Option<Vec<u8>>>> {
        let opts = FindOptions {
            timeout_ms,
            ..host_tests::guest::find_options()
        };
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_find_one(&mut self.store, self.coll, &filter.to_vec(), &opts)
    }

    pub fn count(&mut self, filter: &[u8], timeout_ms: Option<u64>) -> Result<WitResult<i64>> {
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_count(
                &mut self.store,
                self.coll,
                &filter.to_vec(),
                &op_options(timeout_ms),
            )
    }

    /// find; the cursor is iterated with [`Instance::drain`].
    pub fn find(
        &mut self,
        filter: &[u8],
        batch_size: Option<u32>,
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<ResourceAny>> {
        let opts = FindOptions {
            timeout_ms,
            batch_size,
            ..host_tests::guest::find_options()
        };
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_find(&mut self.store, self.coll, &filter.to_vec(), &opts)
    }

    pub fn aggregate(
        &mut self,
        pipeline: &[Vec<u8>],
        batch_size: u32,
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<ResourceAny>> {
        let opts = AggregateOptions {
            timeout_ms,
            batch_size: Some(batch_size),
            ..host_tests::guest::aggregate_options()
        };
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_aggregate(&mut self.store, self.coll, pipeline, &opts)
    }

    /// Every document of the cursor: its batches, getMore after getMore, to the end.
    pub fn drain(&mut self, cursor: ResourceAny) -> Result<WitResult<Vec<Vec<u8>>>> {
        let mut docs = Vec::new();
        loop {
            let batch = self
                .driver
                .mongo_wasi_driver_cursor()
                .cursor()
                .call_next_batch(&mut self.store, cursor)?;
            match batch {
                Ok(b) => {
                    docs.extend(b.documents);
                    if b.exhausted {
                        return Ok(Ok(docs));
                    }
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// Drops a cursor (its destructor kills a server cursor still open).
    pub fn drop_cursor(&mut self, cursor: ResourceAny) -> Result<()> {
        cursor.resource_drop(&mut self.store)
    }

    pub fn take_events(&mut self) -> Result<(Vec<CommandEvent>, Vec<PoolEvent>)> {
        let client = self.driver.mongo_wasi_driver_client().client();
        let commands = client.call_take_command_events(&mut self.store, self.client)?;
        let pool = client.call_take_pool_events(&mut self.store, self.client)?;
        Ok((commands, pool))
    }

    /// Closes the client (ending its sessions) and drops its resources.
    pub fn close(mut self) -> Result<()> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_close(&mut self.store, self.client)?;
        self.coll.resource_drop(&mut self.store)?;
        self.client.resource_drop(&mut self.store)
    }
}
