//! A thin typed wrapper over one instance of the driver component, so tests
//! read like driver code. Every method returns the WIT result unchanged.

use crate::bindings::exports::mongo_wasi::driver::client::ClientOptions;
use crate::bindings::exports::mongo_wasi::driver::collection::{
    AggregateOptions, FindOptions, OpOptions,
};
use crate::bindings::exports::mongo_wasi::driver::cursor::PackedBatch;
use crate::bindings::exports::mongo_wasi::driver::database::{
    CollectionOptions, RunCommandOptions,
};
use crate::bindings::exports::mongo_wasi::driver::types::{
    Batch, BulkWriteError, CommandEvent, Error, PoolEvent, SdamEvent,
};
use crate::bindings::Driver;
use crate::Wait;
use crate::{driver_pre, new_store, wasi_state, HostState};
use std::net::SocketAddr;
use wasmtime::component::ResourceAny;
use wasmtime::Result;
use wasmtime::Store;

pub type WitResult<T> = std::result::Result<T, Error>;

pub struct Guest {
    pub store: Store<HostState>,
    pub driver: Driver,
}

#[derive(Clone, Copy, Debug)]
pub struct Client(pub ResourceAny);
#[derive(Clone, Copy, Debug)]
pub struct Database(pub ResourceAny);
#[derive(Clone, Copy, Debug)]
pub struct Collection(pub ResourceAny);
#[derive(Clone, Copy, Debug)]
pub struct Cursor(pub ResourceAny);

/// The WIT's `op-options` with nothing set, as the record `$t` of either
/// bindings (`bindings` or `async_bindings`).
#[macro_export]
macro_rules! no_op_options {
    ($($t:ident)::+) => {
        $($t)::+ {
            timeout_ms: None,
            session: None,
            extra: None,
            upsert: None,
            ordered: None,
            hint: None,
            collation: None,
            comment: None,
            let_: None,
            array_filters: None,
            return_document: None,
            projection: None,
            sort: None,
            bypass_document_validation: None,
            read_concern: None,
            write_concern: None,
            read_preference: None,
        }
    };
}

/// The WIT's `find-options` with nothing set, as [`no_op_options`] does.
#[macro_export]
macro_rules! no_find_options {
    ($($t:ident)::+) => {
        $($t)::+ {
            timeout_ms: None,
            session: None,
            sort: None,
            projection: None,
            skip: None,
            limit: None,
            batch_size: None,
            timeout_mode: None,
            extra: None,
            hint: None,
            collation: None,
            comment: None,
            let_: None,
            max_await_time_ms: None,
            read_concern: None,
            read_preference: None,
        }
    };
}

/// Op options with nothing set (`..no_options()` fills the rest of a literal).
pub fn no_options() -> OpOptions {
    crate::no_op_options!(OpOptions)
}

/// Find options with nothing set.
pub fn find_options() -> FindOptions {
    crate::no_find_options!(FindOptions)
}

/// Aggregate options with nothing set.
pub fn aggregate_options() -> AggregateOptions {
    AggregateOptions {
        timeout_ms: None,
        session: None,
        batch_size: None,
        timeout_mode: None,
        extra: None,
        hint: None,
        collation: None,
        comment: None,
        let_: None,
        max_await_time_ms: None,
        read_concern: None,
        write_concern: None,
        read_preference: None,
    }
}

/// One BSON value as the WIT `value` shape, `{v: <value>}`.
pub fn value(v: impl Into<bson::Bson>) -> Vec<u8> {
    bson::doc! { "v": v.into() }
        .to_vec()
        .expect("a value encodes")
}

/// The BSON value inside a WIT `value` (`{v: <value>}`).
pub fn unvalue(bytes: &[u8]) -> bson::Bson {
    let d = bson::Document::from_reader(bytes).expect("a value is BSON");
    d.get("v").cloned().expect("a value has v")
}

impl Guest {
    /// A fresh instance whose sockets may connect to `allowed` only.
    pub fn new(allowed: &[SocketAddr]) -> Result<Guest> {
        Guest::with_state(wasi_state(allowed, &[], true))
    }

    /// As [`Guest::new`], with name lookup allowed (for `localhost` URIs).
    pub fn with_name_lookup(allowed: &[SocketAddr]) -> Result<Guest> {
        Guest::in_sandbox(&crate::Sandbox {
            tcp: allowed,
            name_lookup: true,
            ..Default::default()
        })
    }

    /// A fresh instance that may also use the DNS server at `dns` (UDP, and
    /// TCP for truncated answers), named to it by `MONGO_WASI_DNS_SERVER`.
    pub fn with_dns(allowed: &[SocketAddr], dns: SocketAddr) -> Result<Guest> {
        let mut tcp = allowed.to_vec();
        tcp.push(dns);
        let server = dns.to_string();
        let env = [("MONGO_WASI_DNS_SERVER", server.as_str())];
        Guest::in_sandbox(&crate::Sandbox {
            tcp: &tcp,
            udp: &[dns],
            env: &env,
            ..Default::default()
        })
    }

    /// A fresh instance that may reach what `sandbox` allows.
    pub fn in_sandbox(sandbox: &crate::Sandbox) -> Result<Guest> {
        Guest::with_state(crate::wasi_state_with(sandbox, &[], true))
    }

    /// A fresh instance in the given WASI context (e.g. with a preopened directory).
    pub fn with_state(state: HostState) -> Result<Guest> {
        let mut store = new_store(state);
        let driver = driver_pre().instantiate(&mut store)?;
        Ok(Guest { store, driver })
    }

    pub fn connect(
        &mut self,
        uri: &str,
        timeout_ms: Option<u64>,
        monitor: bool,
    ) -> Result<WitResult<Client>> {
        let opts = ClientOptions {
            timeout_ms,
            monitor_commands: monitor,
            server_api: None,
            tls_ca_pem: None,
            tls_certificate_key_pem: None,
            logging: None,
        };
        self.connect_with(uri, opts)
    }

    /// `connect` with every client option.
    pub fn connect_with(&mut self, uri: &str, opts: ClientOptions) -> Result<WitResult<Client>> {
        let r = self
            .driver
            .mongo_wasi_driver_client()
            .client()
            .call_connect(&mut self.store, uri, &opts)
            .w()?;
        Ok(r.map(Client))
    }

    pub fn database(
        &mut self,
        client: Client,
        name: &str,
        timeout_ms: Option<u64>,
    ) -> Result<Database> {
        let opts = CollectionOptions {
            timeout_ms,
            read_concern: None,
            write_concern: None,
            read_preference: None,
        };
        let r = self
            .driver
            .mongo_wasi_driver_client()
            .client()
            .call_database(&mut self.store, client.0, name, &opts)
            .w()?;
        Ok(Database(r))
    }

    pub fn collection(
        &mut self,
        db: Database,
        name: &str,
        timeout_ms: Option<u64>,
    ) -> Result<Collection> {
        let opts = CollectionOptions {
            timeout_ms,
            read_concern: None,
            write_concern: None,
            read_preference: None,
        };
        let r = self
            .driver
            .mongo_wasi_driver_database()
            .database()
            .call_collection(&mut self.store, db.0, name, &opts)
            .w()?;
        Ok(Collection(r))
    }

    pub fn run_command(
        &mut self,
        db: Database,
        command: &bson::RawDocument,
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<bson::RawDocumentBuf>> {
        let opts = RunCommandOptions {
            timeout_ms,
            session: None,
            read_preference: None,
        };
        let r = self
            .driver
            .mongo_wasi_driver_database()
            .database()
            .call_run_command(&mut self.store, db.0, &command.as_bytes().to_vec(), &opts)
            .w()?;
        Ok(r.map(|b| bson::RawDocumentBuf::from_bytes(b).expect("reply is BSON")))
    }

    pub fn insert_many(
        &mut self,
        coll: Collection,
        docs: &[bson::RawDocumentBuf],
        opts: &OpOptions,
    ) -> Result<std::result::Result<Vec<bson::Bson>, BulkWriteError>> {
        let bytes: Vec<Vec<u8>> = docs.iter().map(|d| d.as_bytes().to_vec()).collect();
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_insert_many(&mut self.store, coll.0, &bytes, opts)
            .w()?;
        Ok(r.map(|res| res.inserted_ids.iter().map(|id| unvalue(id)).collect()))
    }

    /// `insert-many-packed`: the documents back to back in one buffer; the
    /// ids come back the same way and are read here.
    pub fn insert_many_packed(
        &mut self,
        coll: Collection,
        packed: &[u8],
        opts: &OpOptions,
    ) -> Result<std::result::Result<Vec<bson::Bson>, BulkWriteError>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_insert_many_packed(&mut self.store, coll.0, packed, opts)
            .w()?;
        Ok(r.map(|ids| {
            let mut out = Vec::new();
            let mut rest = &ids[..];
            while !rest.is_empty() {
                let len = i32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                out.push(unvalue(&rest[..len]));
                rest = &rest[len..];
            }
            out
        }))
    }

    /// `collection.id-filter`: `{_id: <id>}` from a `value` (`{v: <id>}`).
    pub fn id_filter(&mut self, id: &[u8]) -> Result<WitResult<bson::RawDocumentBuf>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_id_filter(&mut self.store, &id.to_vec())
            .w()?;
        Ok(r.map(|bytes| bson::RawDocumentBuf::from_bytes(bytes).expect("a document")))
    }

    pub fn insert_one(
        &mut self,
        coll: Collection,
        doc: &bson::RawDocument,
        opts: &OpOptions,
    ) -> Result<WitResult<bson::Bson>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_insert_one(&mut self.store, coll.0, &doc.as_bytes().to_vec(), opts)
            .w()?;
        Ok(r.map(|res| unvalue(&res.inserted_id)))
    }

    /// `mapReduce` with JavaScript `map`/`reduce` into `out`.
    pub fn map_reduce(
        &mut self,
        coll: Collection,
        map: &str,
        reduce: &str,
        out: &bson::RawDocument,
        opts: &OpOptions,
    ) -> Result<WitResult<bson::RawDocumentBuf>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_map_reduce(
                &mut self.store,
                coll.0,
                map,
                reduce,
                &out.as_bytes().to_vec(),
                opts,
            )
            .w()?;
        Ok(r.map(|d| bson::RawDocumentBuf::from_bytes(d).expect("the result is BSON")))
    }

    pub fn find(
        &mut self,
        coll: Collection,
        filter: &bson::RawDocument,
        opts: &FindOptions,
    ) -> Result<WitResult<Cursor>> {
        let r = self
            .driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_find(&mut self.store, coll.0, &filter.as_bytes().to_vec(), opts)
            .w()?;
        Ok(r.map(Cursor))
    }

    pub fn run_cursor_command(
        &mut self,
        db: Database,
        command: &bson::RawDocument,
        opts: &AggregateOptions,
    ) -> Result<WitResult<Cursor>> {
        let r = self
            .driver
            .mongo_wasi_driver_database()
            .database()
            .call_run_cursor_command(&mut self.store, db.0, &command.as_bytes().to_vec(), opts)
            .w()?;
        Ok(r.map(Cursor))
    }

    pub fn count_documents(
        &mut self,
        coll: Collection,
        filter: &bson::RawDocument,
        opts: &OpOptions,
    ) -> Result<WitResult<i64>> {
        self.driver
            .mongo_wasi_driver_collection()
            .collection()
            .call_count_documents(&mut self.store, coll.0, &filter.as_bytes().to_vec(), opts)
            .w()
    }

    pub fn next_batch(&mut self, cursor: Cursor) -> Result<WitResult<Batch>> {
        self.driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_next_batch(&mut self.store, cursor.0)
            .w()
    }

    /// `cursor.next`: one document, at most one getMore.
    pub fn next(&mut self, cursor: Cursor) -> Result<WitResult<Option<bson::RawDocumentBuf>>> {
        let r = self
            .driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_next(&mut self.store, cursor.0)
            .w()?;
        Ok(r.map(|d| d.map(|d| bson::RawDocumentBuf::from_bytes(d).expect("a document"))))
    }

    /// `cursor.collect(max)`.
    pub fn collect(
        &mut self,
        cursor: Cursor,
        max: u32,
    ) -> Result<WitResult<Vec<bson::RawDocumentBuf>>> {
        let r = self
            .driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_collect(&mut self.store, cursor.0, max)
            .w()?;
        Ok(r.map(|docs| {
            docs.into_iter()
                .map(|d| bson::RawDocumentBuf::from_bytes(d).expect("a document"))
                .collect()
        }))
    }

    /// `next-batch-packed`: the documents back to back in one buffer.
    pub fn next_batch_packed(&mut self, cursor: Cursor) -> Result<WitResult<PackedBatch>> {
        self.driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_next_batch_packed(&mut self.store, cursor.0)
            .w()
    }

    pub fn cursor_id(&mut self, cursor: Cursor) -> Result<i64> {
        self.driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_id(&mut self.store, cursor.0)
            .w()
    }

    /// `timeout_ms` overrides the cursor's timeoutMS for the killCursors.
    pub fn close_cursor(
        &mut self,
        cursor: Cursor,
        timeout_ms: Option<u64>,
    ) -> Result<WitResult<()>> {
        self.driver
            .mongo_wasi_driver_cursor()
            .cursor()
            .call_close(&mut self.store, cursor.0, timeout_ms)
            .w()
    }

    pub fn take_events(&mut self, client: Client) -> Result<Vec<CommandEvent>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_take_command_events(&mut self.store, client.0)
            .w()
    }

    pub fn take_log_messages(
        &mut self,
        client: Client,
    ) -> Result<Vec<crate::bindings::exports::mongo_wasi::driver::types::LogMessage>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_take_log_messages(&mut self.store, client.0)
            .w()
    }

    pub fn take_pool_events(&mut self, client: Client) -> Result<Vec<PoolEvent>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_take_pool_events(&mut self.store, client.0)
            .w()
    }

    pub fn take_sdam_events(&mut self, client: Client) -> Result<Vec<SdamEvent>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_take_sdam_events(&mut self.store, client.0)
            .w()
    }

    /// `client.check-servers`: the server checks that are due, without an operation.
    pub fn check_servers(&mut self, client: Client) -> Result<WitResult<()>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_check_servers(&mut self.store, client.0)
            .w()
    }

    /// `client.append-metadata`: a wrapping library named in new connections' handshakes.
    pub fn append_metadata(
        &mut self,
        client: Client,
        info: &crate::bindings::exports::mongo_wasi::driver::client::DriverInfo,
    ) -> Result<WitResult<()>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_append_metadata(&mut self.store, client.0, info)
            .w()
    }

    /// `client.warm-state`: the blob a client in a new instance can adopt.
    pub fn warm_state(&mut self, client: Client) -> Result<Vec<u8>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_warm_state(&mut self.store, client.0)
            .w()
    }

    /// `client.adopt-warm-state`: how many SCRAM key sets were taken.
    pub fn adopt_warm_state(&mut self, client: Client, blob: &[u8]) -> Result<WitResult<u32>> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_adopt_warm_state(&mut self.store, client.0, blob)
            .w()
    }

    /// `client.scram-derivations`: PBKDF2 runs in this instance.
    pub fn scram_derivations(&mut self, client: Client) -> Result<u64> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_scram_derivations(&mut self.store, client.0)
            .w()
    }

    /// `client.close`: ends its sessions and closes its pooled connections.
    pub fn close(&mut self, client: Client) -> Result<()> {
        self.driver
            .mongo_wasi_driver_client()
            .client()
            .call_close(&mut self.store, client.0)
            .w()
    }

    /// Drops a guest resource (runs its destructor in the guest).
    pub fn drop_resource(&mut self, r: ResourceAny) -> Result<()> {
        crate::drop_resource(r, &mut self.store)
    }
}

/// A client through a failpoint proxy in front of the test server, with a
/// fresh database `db` holding one document in collection `c`: the set-up of
/// the retry tests.
pub struct ProxiedCollection {
    pub guest: Guest,
    pub client: Client,
    pub coll: Collection,
    pub _proxy: mongo_wasi_proxy::Proxy,
}

pub fn proxied_collection(db: &str, uri_options: &str) -> ProxiedCollection {
    use bson::rawdoc;
    let (_, backend) = crate::test_server();
    let proxy =
        mongo_wasi_proxy::Proxy::start(mongo_wasi_proxy::ProxyConfig::new(backend)).unwrap();
    let addr = proxy.addresses()[0];
    let mut guest = Guest::new(&[addr]).unwrap();
    let client = guest
        .connect(&format!("mongodb://{addr}/{uri_options}"), None, true)
        .unwrap()
        .unwrap();
    let database = guest.database(client, db, None).unwrap();
    guest
        .run_command(database, &rawdoc! { "dropDatabase": 1 }, None)
        .unwrap()
        .expect("dropDatabase");
    let coll = guest.collection(database, "c", None).unwrap();
    guest
        .insert_one(coll, &rawdoc! { "x": 1 }, &no_options())
        .unwrap()
        .unwrap();
    ProxiedCollection {
        guest,
        client,
        coll,
        _proxy: proxy,
    }
}
