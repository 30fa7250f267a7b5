//! `--count-calls`: how many WASI calls mongo-wasi makes per operation.
//! wasmtime-wasi opens a tracing span for every host call it serves (its
//! bindings are generated with `tracing`); a subscriber that only counts
//! those spans by function name counts the guest's calls exactly, in this
//! process, with nothing else to install. Resource drops (a pollable's, a
//! list's) are not spans: each `subscribe*` counted stands for one more.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct Counter;

#[derive(Default)]
struct Names {
    module: String,
    function: String,
}

impl Visit for Names {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "module" => self.module = value.to_string(),
            "function" => self.function = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.record_str(field, format!("{value:?}").trim_matches('"'));
    }
}

impl Subscriber for Counter {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        if span.metadata().name() == "wit-bindgen import" {
            let mut names = Names::default();
            span.record(&mut names);
            let key = format!("{}.{}", names.module, names.function);
            *COUNTS.lock().unwrap().entry(key).or_default() += 1;
        }
        Id::from_u64(NEXT_ID.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Starts counting (once per process).
pub fn install() -> anyhow::Result<()> {
    tracing::subscriber::set_global_default(Counter)
        .map_err(|e| anyhow::anyhow!("installing the call counter: {e}"))
}

/// The counts since the last `take`, by `interface.function`.
pub fn take() -> BTreeMap<String, u64> {
    std::mem::take(&mut *COUNTS.lock().unwrap())
}
