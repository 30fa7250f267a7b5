;; The component's WASI preview1 adapter, in place of the stock one that
;; wasm-component-ld bundles. ring's getrandom 0.2 calls preview1's
;; `random_get`, the one preview1 function the driver reaches; the stock
;; adapter would also import wasi:cli/stderr (for its own error messages).
;; This one answers `random_get` from wasi:random/random and imports nothing else.
;;
;; Rebuilt by `cargo xtask build` (which fails if the committed .wasm differs):
;;   wasm-tools parse wasi_snapshot_preview1.wat -o core.wasm
;;   wasm-tools component embed wit --world random-get core.wasm -o wasi_snapshot_preview1.wasm
(module
  (import "env" "memory" (memory 0))
  (import "__main_module__" "cabi_realloc" (func $realloc (param i32 i32 i32 i32) (result i32)))
  (import "wasi:random/random@0.2.12" "get-random-bytes" (func $get_random_bytes (param i64 i32)))
  ;; 8 bytes of the main module's memory for the returned list's (pointer, length).
  (global $ret (mut i32) (i32.const 0))
  ;; Where the host writes the list: `random_get`'s buffer itself.
  (global $dest (mut i32) (i32.const 0))

  ;; random_get(buf, len) -> errno: fills buf[..len] with secure random bytes.
  (func (export "random_get") (param $buf i32) (param $len i32) (result i32)
    (if (i32.eqz (global.get $ret))
      (then
        (global.set $ret
          (call $realloc (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 8)))))
    (global.set $dest (local.get $buf))
    (call $get_random_bytes (i64.extend_i32_u (local.get $len)) (global.get $ret))
    (i32.const 0))

  ;; The host allocates the list of get-random-bytes here: straight into the buffer.
  (func (export "cabi_import_realloc") (param i32 i32 i32 i32) (result i32)
    (global.get $dest))
)
