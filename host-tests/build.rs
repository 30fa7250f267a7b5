//! With feature `async-face`: a host-side view of world `driver-async` whose
//! functions are plain `func`s, so `bindgen!` gives every call the same shape
//! (`call_x(store, ..)`, a future) as the sync world's. Wasmtime's type check
//! compares parameters and results only, and `call_async` on an async-lifted
//! export runs it to completion under the store's event loop.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_ASYNC_FACE").is_none() {
        return;
    }
    let wit = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../wit");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let view = out.join("wit-view");
    std::fs::create_dir_all(&view).unwrap();
    for (file, sync_view) in [("types.wit", false), ("driver-async.wit", true)] {
        let path = wit.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path).unwrap();
        let text = match sync_view {
            true => text.replace(": async func(", ": func("),
            false => text,
        };
        std::fs::write(view.join(file), text).unwrap();
    }
    // bindgen! takes a literal path (relative to the manifest, or absolute).
    let bindings = format!(
        "wasmtime::component::bindgen!({{ path: {:?}, world: \"driver-async\", \
         exports: {{ default: async }} }});\n",
        view.display().to_string()
    );
    std::fs::write(out.join("async_view.rs"), bindings).unwrap();
}
