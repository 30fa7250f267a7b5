//! Every input the fuzzer ever found a problem with, kept in
//! `regressions/<target>/`, runs cleanly now (no panic, memory held under
//! the cap, in time). Add a finding's file there when fixing it.

use mongo_wasi_fuzz::{alloc::Counting, execute, targets, Config, Outcome};

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn saved_findings_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let config = Config::default();
    mongo_wasi_fuzz::install(&config);
    let mut ran = 0;
    for target in targets::TARGETS {
        let Ok(entries) = std::fs::read_dir(dir.join(target.name)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let input = std::fs::read(&path).unwrap();
            match execute(target, &input, &config) {
                Outcome::Ok { elapsed, .. } => {
                    assert!(
                        elapsed < config.slow,
                        "{}: took {elapsed:?}",
                        path.display()
                    )
                }
                Outcome::Panic(m) => panic!("{}: {m}", path.display()),
            }
            ran += 1;
        }
    }
    println!("{ran} saved inputs ran cleanly");
}
